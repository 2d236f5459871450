"""Hermes Agent integration: a memory provider and its plugin folder.

- :class:`~memstrata.integrations.hermes.provider.HermesMemstrataProvider`: memstrata's
  layers behind Hermes' ``MemoryProvider`` hooks;
- :func:`~memstrata.integrations.hermes.plugin.install` /
  :func:`~memstrata.integrations.hermes.plugin.uninstall`: the
  ``$HERMES_HOME/plugins/memstrata`` folder (``memstrata hermes install|uninstall``).

See ``docs/integrations/hermes.md``.
"""

from __future__ import annotations

from memstrata.integrations.hermes.plugin import install, plugin_dir, uninstall
from memstrata.integrations.hermes.provider import HermesMemstrataProvider

__all__ = ["HermesMemstrataProvider", "install", "plugin_dir", "uninstall"]
