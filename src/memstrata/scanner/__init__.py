"""The threat scanner for everything that reaches a system prompt: memory entries,
context files and recalled text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.scanner.scan import ThreatFinding, scan_for_threats, threat_message

__all__ = [
    "ThreatFinding",
    "scan_for_threats",
    "threat_message",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ThreatFinding": "memstrata.scanner.scan",
        "scan_for_threats": "memstrata.scanner.scan",
        "threat_message": "memstrata.scanner.scan",
    },
)
