"""memstrata inside other agent frameworks.

Each integration is a module of its own and imports its framework only when used:

- :mod:`memstrata.integrations.hermes` - a Hermes Agent memory provider and the
  ``memstrata hermes install|uninstall`` plugin writer (``memstrata[hermes]``);
- :mod:`memstrata.integrations.openai_agents` - ``MemstrataSession`` and the memstrata
  tools for the OpenAI Agents SDK (``memstrata[openai-agents]``);
- :mod:`memstrata.integrations.langgraph` - ``MemstrataStore``, a LangGraph ``BaseStore``
  (``memstrata[langgraph]``).

See ``docs/integrations/``.
"""

from __future__ import annotations

__all__: list[str] = []
