"""The web app of ``memstrata ui``: routes, templates and the door.

The door, in order, for every request:

1. **Host and Origin**: :func:`memstrata.mcp.guard.door_refusal`, the MCP server's own
   rules (a DNS-rebinding page arrives under a foreign ``Host``; another site's form or
   script sends its own ``Origin``).
2. **The token**: the URL the server prints carries ``?token=...``. The first request
   with it gets a cookie (``HttpOnly``, ``SameSite=Strict``, named for the port, since
   cookies do not tell ports apart) and is redirected to the same page without the token,
   so it stays out of the history and of any ``Referer``. Every later request must carry
   the cookie.
3. **Forms**: a ``POST`` must come with an ``Origin`` (or, failing that, a ``Referer``)
   of this server, and with the form token every page embeds; both are checked before
   the form is read any further.

Pages are rendered on the server and read without JavaScript; ``static/ui.js`` only
asks for confirmation before forgetting.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memstrata.errors import CuratedMemoryError, MemstrataError
from memstrata.mcp.guard import Policy, door_refusal, header_values
from memstrata.memory.args import check_target
from memstrata.memory.files import Target
from memstrata.ui import views
from memstrata.ui.views import Home

__all__ = ["COOKIE_PREFIX", "UiDoor", "build_app"]

COOKIE_PREFIX = "memstrata_ui_"
_FLASHES = 64  # notes kept for the redirect after a form, oldest dropped first
Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def _page(status: int, title: str, body: str) -> Response:
    text = (
        "<!doctype html><meta charset=utf-8><title>memstrata ui</title>"
        f"<h1>{escape(title)}</h1><p>{escape(body)}</p>"
    )
    return HTMLResponse(text, status_code=status)


class UiDoor:
    """ASGI middleware: the MCP server's Host/Origin rules, then the URL token (kept in a
    cookie after the first visit), then the form checks of a ``POST``."""

    def __init__(self, app: ASGIApp, policy: Policy, *, port: int) -> None:
        assert policy.token is not None, "the inspector always has a token"
        self.app = app
        self.policy = policy
        self.token: str = policy.token
        self.cookie = f"{COOKIE_PREFIX}{port}"
        self.csrf = hmac.new(self.token.encode(), b"form", "sha256").hexdigest()

    def _cookie_token(self, scope: Scope) -> str:
        for raw in header_values(scope, b"cookie"):
            for part in raw.split(";"):
                name, _, value = part.strip().partition("=")
                if name == self.cookie:
                    return value
        return ""

    def _same(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def _own_origin(self, scope: Scope) -> bool:
        origins = header_values(scope, b"origin")
        if origins:  # door_refusal has checked it is ours
            return origins[0].strip().lower() != "null"
        referers = header_values(scope, b"referer")
        if len(referers) != 1:
            return False
        parts = urlsplit(referers[0])
        return f"{parts.scheme}://{parts.netloc}".lower() in self.policy.origins

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)  # lifespan
            return
        refused = door_refusal(scope, self.policy)
        if refused is not None:
            status, error, hint = refused
            await _page(status, error, hint)(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None:
            if not self._same(given):
                await _page(401, "Wrong token", "Open the URL `memstrata ui` printed.")(
                    scope, receive, send
                )
                return
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        if not self._same(self._cookie_token(scope)):
            await _page(
                401,
                "This inspector needs its token",
                "Open the URL `memstrata ui` printed (it ends in ?token=...).",
            )(scope, receive, send)
            return
        if scope.get("method") == "POST" and not self._own_origin(scope):
            await _page(
                403,
                "Form refused",
                "A form must be sent from this inspector's own pages (no Origin or Referer "
                "of this server came with it).",
            )(scope, receive, send)
            return
        scope.setdefault("state", {})["csrf"] = self.csrf
        await self.app(scope, receive, send)


class _Flashes:
    """Notes shown once on the page a form redirects to (POST, redirect, GET)."""

    def __init__(self) -> None:
        self._notes: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, kind: str, text: str) -> str:
        key = secrets.token_urlsafe(8)
        with self._lock:
            self._notes[key] = (kind, text)
            while len(self._notes) > _FLASHES:
                self._notes.popitem(last=False)
        return key

    def take(self, key: str | None) -> tuple[str, str] | None:
        if not key:
            return None
        with self._lock:
            return self._notes.pop(key, None)


def _marked(text: Any) -> Markup:
    """Escape ``text`` and turn the store's ``>>>match<<<`` markers into ``<mark>``."""
    safe = str(escape(str(text or "")))
    safe = safe.replace("&gt;&gt;&gt;", "<mark>").replace("&lt;&lt;&lt;", "</mark>")
    return Markup(safe)  # noqa: S704 - escaped above; only our own markers become tags


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("memstrata.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["marked"] = _marked
    env.filters["when"] = views.when
    env.filters["number"] = lambda n: f"{int(n):,}"
    return env


def _whole(value: str) -> int | None:
    """``value`` as a whole number written in ASCII digits, else None (``str.isdigit``
    also passes "²", which ``int`` refuses)."""
    return int(value) if value.isascii() and value.isdigit() else None


def _date(value: str, name: str, *, end_of_day: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as a timestamp; a bad date raises with the form it wants."""
    value = value.strip()
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise MemstrataError(f"{name} must be a date like 2026-05-14, got {value!r}.") from None
    return day.timestamp() + (86_399.999 if end_of_day else 0.0)


def _target(value: str) -> Target:
    return check_target(value or "memory")


def build_app(home: Home, policy: Policy, *, port: int) -> UiDoor:
    """The inspector over ``home``, behind the door of ``policy`` (its token required)."""
    env = _environment()
    flashes = _Flashes()

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        note = flashes.take(request.query_params.get("note"))
        html = env.get_template(name).render(
            request=request,
            csrf=request.scope["state"]["csrf"],
            note=note,
            backend=home.backend,
            home_path=str(home.config.home),
            namespace=str(home.config.get("store.namespace")),
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def back(path: str, kind: str, text: str, **params: str) -> RedirectResponse:
        query = urlencode({**params, "note": flashes.put(kind, text)})
        return RedirectResponse(f"{path}?{query}", status_code=303)

    async def form(request: Request) -> Mapping[str, str]:
        data = await request.form()
        given = str(data.get("csrf", ""))
        if not hmac.compare_digest(given.encode(), request.scope["state"]["csrf"].encode()):
            raise PermissionError("the form token is missing or stale: reload the page")
        return {k: str(v) for k, v in data.items()}

    def guarded(
        handler: Callable[[Request, Mapping[str, str]], Response],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                data = await form(request)
            except PermissionError as exc:
                return _page(403, "Form refused", str(exc))
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(handler, request, data)

        return endpoint

    # -- memory ----------------------------------------------------------------------

    def memory_page(request: Request) -> Response:
        return render(request, "memory.html", page="memory", **views.memory_view(home))

    def _write(done: Callable[[], Any], what: str) -> RedirectResponse:
        try:
            result = done()
        except CuratedMemoryError as exc:
            text = str(exc)
            entries = exc.details.get("current_entries") or exc.details.get("matches")
            if entries:
                text += " Entries: " + " | ".join(str(e) for e in entries)
            return back("/memory", "error", text)
        except MemstrataError as exc:
            return back("/memory", "error", str(exc))
        message = getattr(result, "message", None) or what
        return back("/memory", "ok", str(message))

    def memory_add(request: Request, data: Mapping[str, str]) -> Response:
        target = _target(data.get("target", ""))
        with home.memory.attributed("ui", "memstrata ui"):
            return _write(lambda: home.memory.add(target, data.get("content", "")), "Added.")

    def memory_replace(request: Request, data: Mapping[str, str]) -> Response:
        target = _target(data.get("target", ""))
        with home.memory.attributed("ui", "memstrata ui"):
            return _write(
                lambda: home.memory.replace(
                    target, data.get("old_text", ""), data.get("content", "")
                ),
                "Replaced.",
            )

    def memory_remove(request: Request, data: Mapping[str, str]) -> Response:
        target = _target(data.get("target", ""))
        with home.memory.attributed("ui", "memstrata ui"):
            return _write(lambda: home.memory.remove(target, data.get("old_text", "")), "Removed.")

    def memory_undo(request: Request, data: Mapping[str, str]) -> Response:
        raw = data.get("change", "")
        if _whole(raw) is None:
            return back("/memory", "error", f"Change {raw!r} is not a change number.")
        force = data.get("force") == "1"
        try:
            with home.memory.attributed("ui", "memstrata ui"):
                change = home.memory.undo(int(raw), force=force)
        except MemstrataError as exc:
            return back("/memory", "error", str(exc))
        return back(
            "/memory",
            "ok",
            f"Undid change #{raw}: {change.target} is back to the bytes it held before it "
            f"(recorded as change #{change.id}).",
        )

    def pending_decide(request: Request, data: Mapping[str, str]) -> Response:
        write_id = data.get("id", "")
        try:
            if data.get("decision") == "approve":
                result = home.pending.approve(write_id, home.memory)
                return back("/memory", "ok", f"Approved {write_id}: {result.message}")
            full = home.pending.reject(write_id)
        except MemstrataError as exc:
            return back("/memory", "error", str(exc))
        return back("/memory", "ok", f"Denied {full}; memory was not changed.")

    def facts_page(request: Request) -> Response:
        return render(request, "facts.html", page="facts", **views.facts_view(home))

    # -- sessions --------------------------------------------------------------------

    def sessions_page(request: Request) -> Response:
        q = request.query_params
        source = q.get("source", "").strip()
        since_text, until_text = q.get("since", ""), q.get("until", "")
        page = _whole(q.get("page", "0")) or 0
        error = None
        listing: dict[str, Any] = {"rows": [], "more": False, "page_number": page}
        try:
            listing = views.sessions_view(
                home,
                source=source or None,
                since=_date(since_text, "since"),
                until=_date(until_text, "until", end_of_day=True),
                page=page,
            )
        except MemstrataError as exc:
            error = str(exc)
        filters = {"source": source, "since": since_text, "until": until_text}
        return render(
            request,
            "sessions.html",
            status=400 if error else 200,
            page="sessions",
            error=error,
            filters=filters,
            next_query=urlencode({**filters, "page": page + 1}),
            prev_query=urlencode({**filters, "page": max(0, page - 1)}),
            **listing,
        )

    def session_page(request: Request) -> Response:
        ref = request.path_params["ref"]
        try:
            view = views.session_view(home, ref)
        except MemstrataError as exc:
            return render(request, "error.html", status=404, page="sessions", error=str(exc))
        return render(request, "session.html", page="sessions", **view)

    # -- recall ----------------------------------------------------------------------

    def recall_page(request: Request) -> Response:
        q = request.query_params
        query = q.get("q", "")
        source = q.get("source", "").strip()
        summarize = q.get("summarize") == "1"
        answer: dict[str, Any] | None = None
        error = None
        if query.strip():
            try:
                answer = views.recall_view(home, query, source=source, summarize=summarize)
            except MemstrataError as exc:
                error = str(exc)
        return render(
            request,
            "recall.html",
            page="recall",
            query=query,
            source=source,
            summarize=summarize,
            answer=answer,
            error=error,
        )

    # -- curator and forget ----------------------------------------------------------

    def curate_page(request: Request) -> Response:
        use_model = request.query_params.get("model") == "1"
        previews = [
            views.curate_preview(home, target, use_model=use_model) for target in ("memory", "user")
        ]
        return render(request, "curate.html", page="curate", previews=previews, model=use_model)

    def curate_apply(request: Request, data: Mapping[str, str]) -> Response:
        target = _target(data.get("target", ""))
        try:
            report = views.run_curate(home, target, use_model=data.get("model") == "1")
        except MemstrataError as exc:
            return back("/curate", "error", str(exc))
        if report["rejected"]:
            return back("/curate", "error", f"Plan rejected, nothing changed: {report['rejected']}")
        if not report["applied"]:
            return back("/curate", "ok", "Nothing to do: the file did not change.")
        return back(
            "/memory",
            "ok",
            f"Curated {target}: {report['entries_before']} -> {report['entries_after']} "
            f"entries, applied as change #{report['change_id']} (undo it below).",
        )

    def _forget_args(source: Mapping[str, str]) -> dict[str, Any]:
        return {
            "sessions": [s.strip() for s in source.get("session", "").split(",") if s.strip()],
            "query": source.get("query", "").strip() or None,
            "since": _date(source.get("since", ""), "since"),
            "until": _date(source.get("until", ""), "until", end_of_day=True),
        }

    def forget_page(request: Request) -> Response:
        q = {k: request.query_params.get(k, "") for k in ("session", "query", "since", "until")}
        plan = None
        error = None
        if any(v.strip() for v in q.values()):
            try:
                plan = views.forget_preview(home, **_forget_args(q))
            except MemstrataError as exc:
                error = str(exc)
        return render(request, "forget.html", page="forget", form=q, plan=plan, error=error)

    def forget_apply(request: Request, data: Mapping[str, str]) -> Response:
        fields = {k: data.get(k, "") for k in ("session", "query", "since", "until")}
        try:
            args = _forget_args(fields)
            plan = views.forget_preview(home, **args)
            if plan.is_empty:
                return back("/forget", "ok", "Nothing matches: nothing was forgotten.")
            # The preview the user confirmed must still be what goes.
            if data.get("expect", "") != plan_digest(plan):
                return back(
                    "/forget",
                    "error",
                    "What the form would forget changed since the preview: review it again.",
                    **fields,
                )
            report = views.run_forget(home, plan, query=args["query"])
        except MemstrataError as exc:
            return back("/forget", "error", str(exc), **fields)
        removed = ", ".join(f"{n} {k}" for k, n in sorted(report["removed"].items()) if n)
        return back("/forget", "ok", f"Forgotten: {removed or 'nothing'}.")

    # -- health ----------------------------------------------------------------------

    def health_page(request: Request) -> Response:
        return render(request, "health.html", page="health", **views.health_view(home))

    def index(request: Request) -> Response:
        return RedirectResponse("/memory", status_code=303)

    env.globals["plan_digest"] = plan_digest
    routes = [
        Route("/", index),
        Route("/memory", memory_page),
        Route("/memory/add", guarded(memory_add), methods=["POST"]),
        Route("/memory/replace", guarded(memory_replace), methods=["POST"]),
        Route("/memory/remove", guarded(memory_remove), methods=["POST"]),
        Route("/memory/undo", guarded(memory_undo), methods=["POST"]),
        Route("/memory/pending", guarded(pending_decide), methods=["POST"]),
        Route("/facts", facts_page),
        Route("/sessions", sessions_page),
        Route("/sessions/{ref:path}", session_page),
        Route("/recall", recall_page),
        Route("/curate", curate_page),
        Route("/curate/apply", guarded(curate_apply), methods=["POST"]),
        Route("/forget", forget_page),
        Route("/forget/apply", guarded(forget_apply), methods=["POST"]),
        Route("/health", health_page),
        Mount("/static", StaticFiles(packages=[("memstrata.ui", "static")]), name="static"),
    ]
    app = Starlette(routes=routes)
    return UiDoor(app, policy, port=port)


def plan_digest(plan: Any) -> str:
    """A short fingerprint of what a forget plan removes, carried by the confirm form."""
    import hashlib
    import json

    data = json.dumps(
        [plan.session_ids, plan.message_ids, [m["id"] for m in plan.messages], plan.memory_changes],
        sort_keys=True,
    )
    return hashlib.sha256(data.encode()).hexdigest()[:16]
