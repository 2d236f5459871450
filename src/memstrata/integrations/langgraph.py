"""LangGraph integration: :class:`MemstrataStore`, a LangGraph ``BaseStore`` kept in
memstrata's session store (``pip install 'memstrata[langgraph]'``).

Why the session store and not the facts store: the session store runs on SQLite and on
PostgreSQL with the same API, its recall is what ``session_search`` uses (words ORed and
ranked, CJK bigrams, dates), and it stores any JSON value verbatim. The facts store is
SQLite only and is shaped for short sentences about the user: one live text per
subject, categories, slots. LangGraph items are arbitrary dicts under arbitrary
namespaces, so they fit messages better than facts.

Layout:

* a namespace (a tuple of labels) is one session, id ``langgraph:<sha256 of the
  namespace>``, source ``langgraph``; the namespace itself is kept in the session's
  ``model_config``, so ``list_namespaces`` can give it back;
* an item is one message of that session: the indexed text (every string in the value,
  or the fields ``index`` names) as ``content``, and ``{key, value, created_at,
  updated_at}`` verbatim as ``api_content``;
* ``put`` appends the new version, then deletes the older ones; a read keeps the newest
  message per key, so a crash between the two steps never loses or doubles an item;
* ``search`` with a ``query`` ranks the namespace's items with memstrata's recall
  (``score`` is its relevance), then lists the items without a match, as LangGraph's
  stores do for items without a vector; ``filter`` compares values like LangGraph's
  own stores (equality, nested dicts, ``$eq $ne $gt $gte $lt $lte``).

Reads of one namespace load its items, so keep a namespace to thousands of items
(one per user or per topic, as LangGraph's examples do), not millions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memstrata.config import Config
from memstrata.errors import SessionStoreError
from memstrata.store.contract import SessionStoreContract

SOURCE: Final = "langgraph"
ROLE: Final = "memory"
_ID_PREFIX: Final = "langgraph:"
# Ranked hits read per search before the unmatched items are appended.
MAX_RANKED: Final = 1000
_LIST_PAGE: Final = 500
_OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def session_id_for(namespace: tuple[str, ...]) -> str:
    """The session holding ``namespace``: a digest, so any labels fit an id."""
    raw = json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))
    return _ID_PREFIX + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _strings(inner)


def _at_path(value: Any, path: str) -> list[Any]:
    """Values at a dotted ``path``; ``[*]`` or ``[n]`` steps into lists (LangGraph's
    index path syntax, enough of it for text extraction)."""
    current = [value]
    for step in path.split("."):
        name, _, rest = step.partition("[")
        found: list[Any] = []
        for node in current:
            inner = node.get(name) if isinstance(node, Mapping) and name else node
            if inner is None:
                continue
            if rest:
                index = rest.rstrip("]")
                if not isinstance(inner, list):
                    continue
                if index == "*":
                    found.extend(inner)
                elif index.lstrip("-").isdigit() and -len(inner) <= int(index) < len(inner):
                    found.append(inner[int(index)])
            else:
                found.append(inner)
        current = found
    return current


def indexed_text(value: Mapping[str, Any], index: Any) -> str | None:
    """The text recall indexes for ``value``: every string, or those at the ``index``
    paths; None when ``index`` is False."""
    if index is False:
        return None
    if index is None or index == ["$"]:
        parts = list(_strings(value))
    else:
        parts = [s for path in index for node in _at_path(value, path) for s in _strings(node)]
    text = "\n".join(p for p in parts if p.strip())
    return text or None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _compare(actual: Any, operator: str, expected: Any) -> bool:
    if operator == "$eq":
        return bool(actual == expected)
    if operator == "$ne":
        return bool(actual != expected)
    left, right = _number(actual), _number(expected)
    if left is None or right is None:
        return False
    return {
        "$gt": left > right,
        "$gte": left >= right,
        "$lt": left < right,
        "$lte": left <= right,
    }[operator]


def matches(actual: Any, wanted: Any) -> bool:
    """Whether a stored value satisfies one filter value (JSON-containment style)."""
    if isinstance(wanted, Mapping):
        operators = [k for k in wanted if isinstance(k, str) and k.startswith("$")]
        if operators:
            unknown = sorted(set(operators) - set(_OPERATORS))
            if unknown:
                raise SessionStoreError(
                    f"Unknown filter operator(s) {', '.join(unknown)}; use {', '.join(_OPERATORS)}."
                )
            return all(_compare(actual, op, wanted[op]) for op in operators)
        if not isinstance(actual, Mapping):
            return False
        return all(matches(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(matches(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _namespace_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    if not path:
        return True
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))


class MemstrataStore(BaseStore):
    """A LangGraph store in memstrata's session store (SQLite or PostgreSQL).

    ``store`` is a memstrata ``SessionStore`` or ``PostgresSessionStore``; by default
    the store the memstrata config names is opened (and closed by :meth:`close`).
    Values must be JSON-able dicts.
    """

    supports_ttl: bool = False

    def __init__(
        self, store: SessionStoreContract | None = None, *, config: Config | None = None
    ) -> None:
        self._owns = store is None
        if store is None:
            from memstrata.backends import open_store

            store = open_store(config)
        self.store: SessionStoreContract = store
        self._lock = threading.RLock()

    def close(self) -> None:
        """Close the session store if this object opened it."""
        if self._owns:
            self.store.close()

    def __enter__(self) -> MemstrataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- LangGraph's two entry points ----------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; results line up with ``ops``."""
        results: list[Result] = []
        with self._lock:
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op.namespace, op.key))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, PutOp):
                    self._put(op)
                    results.append(None)
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    raise SessionStoreError(
                        f"Unknown store operation {type(op).__name__}: LangGraph sends "
                        "GetOp, SearchOp, PutOp or ListNamespacesOp."
                    )
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the stores' calls block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- items ----------------------------------------------------------------------------

    def _rows(self, namespace: tuple[str, ...]) -> dict[str, tuple[int, dict[str, Any]]]:
        """key -> (message id, stored record) of the newest version of each item."""
        sid = session_id_for(namespace)
        if self.store.get_session(sid) is None:
            return {}
        out: dict[str, tuple[int, dict[str, Any]]] = {}
        for row in self.store.get_messages(sid):
            record = row.get("api_content")
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                out[record["key"]] = (int(row["id"]), record)
        return out

    @staticmethod
    def _item(namespace: tuple[str, ...], record: Mapping[str, Any]) -> Item:
        return Item(
            value=dict(record["value"]),
            key=record["key"],
            namespace=namespace,
            created_at=_when(float(record["created_at"])),
            updated_at=_when(float(record["updated_at"])),
        )

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = self._rows(tuple(namespace)).get(key)
        return self._item(tuple(namespace), found[1]) if found else None

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        sid = session_id_for(namespace)
        rows = self.store.get_messages(sid) if self.store.get_session(sid) else []
        versions = [
            (int(r["id"]), r["api_content"])
            for r in rows
            if isinstance(r.get("api_content"), dict) and r["api_content"].get("key") == op.key
        ]
        if op.value is None:
            self.store.delete_messages([mid for mid, _ in versions])
            return
        if not isinstance(op.value, Mapping):
            raise SessionStoreError(
                f"A LangGraph store value must be a dict, not {type(op.value).__name__}."
            )
        now = datetime.now(UTC).timestamp()
        record = {
            "key": op.key,
            "value": dict(op.value),
            "created_at": versions[-1][1].get("created_at", now) if versions else now,
            "updated_at": now,
        }
        self.store.create_session(sid, source=SOURCE, model_config={"namespace": list(namespace)})
        self.store.append_message(
            sid, ROLE, indexed_text(op.value, op.index), tool_name=op.key, api_content=record
        )
        # The new version is stored before the old ones go: a crash in between leaves a
        # duplicate that reads resolve to the newest, never a lost item.
        self.store.delete_messages([mid for mid, _ in versions])

    # -- search ---------------------------------------------------------------------------

    def _namespaces(self) -> list[tuple[str, ...]]:
        """Every namespace holding at least one item."""
        found: list[tuple[str, ...]] = []
        offset = 0
        while True:
            page = self.store.list_sessions_rich(
                source=SOURCE, limit=_LIST_PAGE, offset=offset, include_archived=True
            )
            for row in page:
                if not row.get("message_count"):
                    continue
                session = self.store.get_session(str(row["id"]))
                config = session.get("model_config") if session else None
                if isinstance(config, dict) and isinstance(config.get("namespace"), list):
                    found.append(tuple(str(label) for label in config["namespace"]))
            if len(page) < _LIST_PAGE:
                return found
            offset += _LIST_PAGE

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        spaces = [ns for ns in self._namespaces() if ns[: len(prefix)] == prefix]
        candidates: dict[int, tuple[tuple[str, ...], dict[str, Any]]] = {}
        for ns in spaces:
            for message_id, record in self._rows(ns).values():
                if all(matches(record["value"].get(k), v) for k, v in (op.filter or {}).items()):
                    candidates[message_id] = (ns, record)
        ordered: list[tuple[float | None, int]] = []
        if op.query and op.query.strip() and candidates:
            wanted = {session_id_for(ns) for ns in spaces}
            hits = self.store.search_messages(
                op.query, source_filter=SOURCE, role_filter=ROLE, limit=MAX_RANKED
            )
            for hit in hits:
                if hit["session_id"] in wanted and hit["id"] in candidates:
                    ordered.append((float(hit["score"]), int(hit["id"])))
        ranked = {mid for _, mid in ordered}
        ordered += [(None, mid) for mid in candidates if mid not in ranked]
        page = ordered[op.offset : op.offset + op.limit]
        out: list[SearchItem] = []
        for score, mid in page:
            ns, record = candidates[mid]
            item = self._item(ns, record)
            out.append(
                SearchItem(
                    namespace=item.namespace,
                    key=item.key,
                    value=item.value,
                    created_at=item.created_at,
                    updated_at=item.updated_at,
                    score=score,
                )
            )
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = self._namespaces()
        conditions: Sequence[MatchCondition] = op.match_conditions or ()
        kept = [ns for ns in spaces if all(_namespace_matches(ns, c) for c in conditions)]
        if op.max_depth is not None:
            kept = [ns[: op.max_depth] for ns in kept]
        unique = sorted(set(kept))
        return unique[op.offset : op.offset + op.limit]
