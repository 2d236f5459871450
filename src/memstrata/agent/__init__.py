"""The reference agent loop: the memory lifecycle wired over any OpenAI-compatible chat API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.agent.loop import Agent
    from memstrata.agent.settings import AgentSettings
    from memstrata.agent.turn import Pricing, TurnResult

__all__ = [
    "Agent",
    "AgentSettings",
    "Pricing",
    "TurnResult",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Agent": "memstrata.agent.loop",
        "AgentSettings": "memstrata.agent.settings",
        "Pricing": "memstrata.agent.turn",
        "TurnResult": "memstrata.agent.turn",
    },
)
