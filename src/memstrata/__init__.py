"""memstrata: layered, prompt-cache-friendly long-term memory for LLM agents."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from memstrata.config import Config, memstrata_home
from memstrata.errors import MemstrataError
from memstrata.scanner import ThreatFinding, scan_for_threats

try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = [
    "Config",
    "MemstrataError",
    "ThreatFinding",
    "__version__",
    "memstrata_home",
    "scan_for_threats",
]
