"""Test doubles for code built on memstrata, importable without pytest.

- :class:`ScriptedClient`: an in-process :class:`~memstrata.llm.types.LLMClient` answering
  from a script of :class:`Reply` values and recording every request (no socket).
- :class:`RecordingProvider`: a memory provider answering from fixed values and recording
  every hook call (mirrored memory writes included); :func:`tool_schema` declares its tools.
- :class:`TemporaryHome`: curated memory and a session store in a temporary folder,
  removed on close; :meth:`TemporaryHome.manager` builds a manager over them.
- :class:`FakeLLMServer`: a deterministic OpenAI-compatible HTTP server on 127.0.0.1
  (chat completions, streaming, tool calls, embeddings, scripted failures and delays;
  Anthropic's messages API too), for tests of the HTTP path.
- :class:`Reply`: what the fake server and the scripted client answer.
- :func:`hash_embedding` / :func:`bag_of_words_embedding`: the vectors its embeddings
  endpoint returns, so tests can compute expectations.
- :func:`approx_tokens` / :func:`common_prefix_length`: its token estimate and the
  prefix a prompt cache would reuse between two requests.
- :mod:`memstrata.testing.store_contract` and :mod:`memstrata.testing.facts_contract`:
  the behaviour suites every session-store and facts-store backend passes.

See ``docs/testing.md`` for complete examples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.testing.embeddings import bag_of_words_embedding, cosine, hash_embedding
    from memstrata.testing.fake_llm import FakeLLMServer, RecordedRequest
    from memstrata.testing.home import TemporaryHome
    from memstrata.testing.providers import HookCall, RecordingProvider, tool_schema
    from memstrata.testing.replies import FakeToolCall, Reply
    from memstrata.testing.scripted import ScriptedClient, ScriptedRequest
    from memstrata.testing.wire import approx_tokens, common_prefix_length

__all__ = [
    "FakeLLMServer",
    "FakeToolCall",
    "HookCall",
    "RecordedRequest",
    "RecordingProvider",
    "Reply",
    "ScriptedClient",
    "ScriptedRequest",
    "TemporaryHome",
    "approx_tokens",
    "bag_of_words_embedding",
    "common_prefix_length",
    "cosine",
    "hash_embedding",
    "tool_schema",
]

# Imported on first use: the HTTP server, the store and the providers are loaded only
# by the tests that use them.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FakeLLMServer": "memstrata.testing.fake_llm",
        "FakeToolCall": "memstrata.testing.replies",
        "HookCall": "memstrata.testing.providers",
        "RecordedRequest": "memstrata.testing.fake_llm",
        "RecordingProvider": "memstrata.testing.providers",
        "Reply": "memstrata.testing.replies",
        "ScriptedClient": "memstrata.testing.scripted",
        "ScriptedRequest": "memstrata.testing.scripted",
        "TemporaryHome": "memstrata.testing.home",
        "approx_tokens": "memstrata.testing.wire",
        "bag_of_words_embedding": "memstrata.testing.embeddings",
        "common_prefix_length": "memstrata.testing.wire",
        "cosine": "memstrata.testing.embeddings",
        "hash_embedding": "memstrata.testing.embeddings",
        "tool_schema": "memstrata.testing.providers",
    },
)
