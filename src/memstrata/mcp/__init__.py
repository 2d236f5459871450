"""The MCP server: the library's tools and the active provider's tools for any MCP client."""

from __future__ import annotations
