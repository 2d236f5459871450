"""``memstrata chat``: a terminal chat with streaming replies, memory and slash commands."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memstrata.cli.common import CONTEXT_SETTINGS
from memstrata.config import Config, ensure_home
from memstrata.errors import LLMError, LLMNotConfiguredError, MemstrataError
from memstrata.llm.types import ToolCall

logger = logging.getLogger(__name__)

PROMPT = "you> "
REPLY = "assistant> "
HELP = """\
Commands:
  /new                start a new session (memory is re-read)
  /compress [focus]   summarise the middle of this conversation now
  /memory             show the saved memory entries (live, on disk)
  /search QUERY       search past conversations
  /sessions           list recent conversations
  /resume ID|TITLE    continue a stored conversation
  /title [TEXT]       show or set this conversation's title
  /help               this list
  /quit               leave (Ctrl-D works too)"""

if TYPE_CHECKING:  # the agent (and the openai SDK) load only when chat runs
    from memstrata.agent.loop import Agent


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


@dataclass
class _Chat:
    """The slash commands over one agent."""

    agent: Agent

    def commands(self) -> dict[str, Callable[[str], bool]]:
        return {
            "/help": self.help,
            "/new": self.new,
            "/compress": self.compress,
            "/memory": self.memory,
            "/search": self.search,
            "/sessions": self.sessions,
            "/resume": self.resume,
            "/title": self.title,
            "/quit": self.quit,
            "/exit": self.quit,
        }

    def run(self, line: str) -> bool:
        """Run a slash command; False means leave the chat."""
        name, _, arg = line.strip().partition(" ")
        command = self.commands().get(name.lower())
        if command is None:
            click.echo(f"Unknown command {name}. Type /help for the list.")
            return True
        try:
            return command(arg.strip())
        except MemstrataError as exc:
            click.echo(f"Error: {exc}")
        return True

    def help(self, arg: str) -> bool:
        click.echo(HELP)
        return True

    def quit(self, arg: str) -> bool:
        return False

    def new(self, arg: str) -> bool:
        session = self.agent.new_session(title=arg or None)
        click.echo(f"New session {session}. Memory was re-read into its prompt.")
        return True

    def compress(self, arg: str) -> bool:
        done = self.agent.compress(arg or None)
        result = done.result
        if not result.compressed:
            click.echo(f"Nothing compressed ({result.status}): {result.reason or 'no change'}.")
            return True
        kind = "a fallback summary" if result.used_fallback else "a summary"
        where = (
            f"continuing in session {done.session_id} (after {done.parent_session_id})"
            if done.split
            else f"session {done.session_id} compacted in place"
        )
        click.echo(
            f"Compressed {result.dropped_count} messages into {kind} "
            f"(~{result.tokens_before:,} -> ~{result.tokens_after:,} tokens); {where}."
        )
        return True

    def memory(self, arg: str) -> bool:
        memory = self.agent.memory
        for target, label in (("user", "USER.md (user profile)"), ("memory", "MEMORY.md (notes)")):
            entries = memory.entries(target)  # type: ignore[arg-type]
            click.echo(f"{label} [{memory.usage(target)}]")  # type: ignore[arg-type]
            for entry in entries or ["(empty)"]:
                click.echo(f"  - {entry}")
        click.echo("Writes show in the system prompt from the next session on.")
        return True

    def search(self, arg: str) -> bool:
        from memstrata.search.recall import session_search

        if not arg:
            click.echo("Usage: /search QUERY")
            return True
        found = session_search(
            self.agent.store,
            arg,
            current_session_id=self.agent.session_id,
            summarize=False,
            config=self.agent.config,
        )
        results = found.get("results") or []
        if not results:
            click.echo(found.get("message") or "No matching conversations found.")
            return True
        for item in results:
            title = item.get("title") or "(untitled)"
            click.echo(f"{item['session_id']}  {title}  {item.get('last_active', '')}")
            text = item.get("snippet") or item.get("excerpt") or ""
            if text:
                click.echo("    " + " ".join(str(text).split())[:300])
        return True

    def sessions(self, arg: str) -> bool:
        rows = self.agent.store.list_sessions_rich(limit=15)
        if not rows:
            click.echo("No stored conversations yet.")
            return True
        short = self.agent.store.short_ids(row["id"] for row in rows)
        for row in rows:
            mark = "*" if self.agent.session_id in row["session_ids"] else " "
            title = row.get("title") or "(untitled)"
            preview = " ".join(str(row.get("preview") or "").split())[:60]
            click.echo(
                f"{mark} {short[row['id']]}  {title}  {row['message_count']} msgs  {preview}"
            )
        return True

    def resume(self, arg: str) -> bool:
        if not arg:
            click.echo("Usage: /resume ID|TITLE (see /sessions)")
            return True
        store = self.agent.store
        ref = store.resolve_session(arg)
        session = self.agent.resume(ref)
        count = len(self.agent.messages)
        click.echo(f"Resumed session {session} ({count} messages).")
        for message in self.agent.messages[-2:]:
            if message["role"] in ("user", "assistant") and message.get("content"):
                who = PROMPT if message["role"] == "user" else REPLY
                click.echo(f"{who}{message['content']}")
        return True

    def title(self, arg: str) -> bool:
        if not arg:
            click.echo(f"Title: {self.agent.title or '(none)'}")
            return True
        click.echo(f"Title set: {self.agent.set_title(arg)}")
        return True


class _OneLine(logging.Formatter):
    """Warnings on the terminal as one line; tracebacks go to the log file only."""

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.levelname.lower()}] {record.getMessage()}"


@contextlib.contextmanager
def _chat_logging(home: Path) -> Iterator[None]:
    """While the chat runs, log memstrata's details to ``<home>/logs/chat.log`` and show
    warnings on the terminal as one line (never a traceback); undone afterwards."""
    root = logging.getLogger("memstrata")
    saved = (root.level, root.propagate)
    terminal = logging.StreamHandler(sys.stderr)
    terminal.setLevel(logging.WARNING)
    terminal.setFormatter(_OneLine())
    handlers: list[logging.Handler] = [terminal]
    try:
        folder = ensure_home(home) / "logs"
        folder.mkdir(exist_ok=True)
        logfile = logging.FileHandler(folder / "chat.log", encoding="utf-8")
    except (OSError, MemstrataError):
        pass  # an unwritable home: the terminal line is still shown
    else:
        logfile.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(logfile)
    root.setLevel(logging.INFO)
    root.propagate = False
    for handler in handlers:
        root.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(saved[0])
        root.propagate = saved[1]


def _show_tool(call: ToolCall) -> None:
    _out(f"\n  [{call.name}]\n")


def _turn(agent: Agent, line: str) -> None:
    _out(REPLY)
    try:
        result = agent.run_turn(line, on_text=_out, on_tool_call=_show_tool)
    except KeyboardInterrupt:
        _out("\n[interrupted]\n")
        return
    except LLMError as exc:
        _out("\n")
        click.echo(f"Error: {exc}")
        return
    except MemstrataError as exc:
        _out("\n")
        click.echo(f"Error: {exc}")
        return
    except Exception as exc:  # the edge: the chat stays up and the details go to the log
        logger.exception("chat turn failed")
        _out("\n")
        click.echo(f"Error: unexpected {type(exc).__name__}: {exc}")
        return
    _out("\n")
    if result.compressed:
        click.echo(f"[context compressed; continuing in session {result.session_id}]")


@click.command("chat", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model",
    "-m",
    default=None,
    help="Model name (default: llm.model); 'demo' runs a scripted offline demo model.",
)
@click.option("--resume", "resume_ref", default=None, help="Continue a session (id or title).")
@click.option("--title", default=None, help="Title of the new session.")
@click.option("--system", "system_message", default=None, help="Extra system message.")
@click.option(
    "--context-window",
    default=128_000,
    show_default=True,
    type=click.IntRange(min=1024),
    help="The model's context window in tokens (compression starts at 75 %).",
)
@click.option("--no-stream", is_flag=True, help="Wait for whole replies instead of streaming.")
def chat_command(
    model: str | None,
    resume_ref: str | None,
    title: str | None,
    system_message: str | None,
    context_window: int,
    no_stream: bool,
) -> None:
    """Chat with a model in the terminal, with long-term memory and session search.

    The model comes from `memstrata config set llm.model` or MEMSTRATA_MODEL, at the
    endpoint in llm.base_url / OPENAI_BASE_URL with the key in llm.api_key /
    OPENAI_API_KEY. Type /help in the chat for the slash commands.

    --model demo needs no model at all: a scripted offline stand-in (labelled [demo])
    that saves and reads memories and searches past sessions with the real tools.

    \b
    Example:
        memstrata chat --model demo
        export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 MEMSTRATA_MODEL=qwen2.5
        memstrata chat --title "Trip planning"
    """
    from memstrata.agent.loop import Agent
    from memstrata.agent.settings import AgentSettings
    from memstrata.llm.demo import DEMO_BANNER, DEMO_MODEL, DemoClient
    from memstrata.llm.settings import client_for
    from memstrata.llm.types import LLMClient

    config = Config.load()
    client: LLMClient
    demo = (model or "").strip().lower() == DEMO_MODEL
    try:
        client = DemoClient() if demo else client_for("main", config, model=model)
    except LLMNotConfiguredError as exc:
        raise click.ClickException(
            f"{exc}\nQuick start: export OPENAI_BASE_URL=... OPENAI_API_KEY=... "
            "MEMSTRATA_MODEL=..., or run `memstrata config set llm.model MODEL`. To try "
            "memstrata with no model at all: `memstrata chat --model demo`."
        ) from None
    with _chat_logging(config.home):
        agent = Agent.from_config(
            config,
            client=client,
            settings=AgentSettings(
                title=title,
                system_message=system_message,
                cwd=Path.cwd(),
                context_window=context_window,
                stream=not no_stream,
            ),
        )
        chat = _Chat(agent)
        try:
            agent.start()
            if resume_ref:
                chat.resume(resume_ref)
            click.echo(
                f"memstrata chat - session {agent.session_id}, model {client.model}. "
                "Type /help for commands, Ctrl-D to leave."
            )
            if demo:
                click.secho(DEMO_BANNER, fg="yellow")
            while True:
                try:
                    line = input(PROMPT)
                except EOFError:
                    _out("\n")
                    break
                except KeyboardInterrupt:
                    _out("\n")
                    break
                if not line.strip():
                    continue
                if line.startswith("/"):
                    if not chat.run(line):
                        break
                    continue
                _turn(agent, line)
        finally:
            stored = agent.store.get_session(agent.session_id) is not None
            agent.close()
            client.close()
            if stored:
                click.echo(
                    f"Session {agent.session_id} saved; continue it with "
                    f"`memstrata chat --resume {agent.session_id}`."
                )
