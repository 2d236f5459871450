"""What a command prints to a terminal is text, never instructions to the terminal.

Stored text reaches the screen: a message a web page wrote, a session title, a memory
entry, a model's reply. Control characters in it would act on the terminal showing it:
retitle or clear it, move the cursor over what was printed, set the clipboard (OSC 52),
make it answer a query as if the user had typed the answer. While a command runs, its
stdout and stderr, when they are terminals, show each such character as its Unicode
control picture (ESC as ``␛``, BEL as ``␇``) and pass through only the colour and weight
sequences (SGR, ``ESC [ … m``) with which click and rich style their own output. Output
that is piped or redirected is written as it is: an export to a file keeps its bytes.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# A colour/weight sequence, the one escape a command's own styling writes.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F: U+009B
# alone starts a sequence on terminals that read 8-bit controls).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PICTURES = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_PICTURES |= dict.fromkeys(range(0x80, 0xA0), 0xFFFD)
del _PICTURES[0x09], _PICTURES[0x0A]


def shown(text: str) -> str:
    """``text`` as a terminal may show it: its control characters as pictures, but tab,
    newline, a carriage return before a newline, and SGR sequences."""
    if not _CONTROL.search(text):
        return text
    parts = []
    at = 0
    for match in _SGR.finditer(text):
        parts.append(_pictured(text[at : match.start()]))
        parts.append(match.group())
        at = match.end()
    parts.append(_pictured(text[at:]))
    return "".join(parts)


def _pictured(text: str) -> str:
    return text.replace("\r\n", "\n").translate(_PICTURES)


class ShownStream(io.TextIOBase):
    """A terminal's text stream whose writes go through :func:`shown`.

    ``fileno`` and ``isatty`` are the terminal's, so ``input()`` keeps its line editing
    and click and rich still style their output; ``buffer`` is the terminal's too, for
    code that writes bytes it encoded itself (the MCP stdio transport).
    """

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # what a text stream does: click probes with b""
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.raw.write(shown(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(self.raw.encoding)

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.raw.errors

    @property
    def buffer(self) -> Any:
        return self.raw.buffer


def raw(stream: TextIO) -> TextIO:
    """The terminal under a :class:`ShownStream` (``stream`` itself otherwise): for the
    progress bars and spinners, which move the cursor on purpose and show only the
    command's own words."""
    return stream.raw if isinstance(stream, ShownStream) else stream


@contextmanager
def shown_output() -> Iterator[None]:
    """Run the block with stdout and stderr shown through :class:`ShownStream` where they
    are terminals; put them back afterwards."""
    saved = sys.stdout, sys.stderr
    try:
        if _is_terminal(sys.stdout):
            sys.stdout = ShownStream(sys.stdout)
        if _is_terminal(sys.stderr):
            sys.stderr = ShownStream(sys.stderr)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, ShownStream):
                stream.flush()
        sys.stdout, sys.stderr = saved


def _is_terminal(stream: TextIO | None) -> bool:
    if stream is None or isinstance(stream, ShownStream):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
