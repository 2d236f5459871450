"""Test doubles for code built on memstrata, importable without pytest.

- :class:`FakeLLMServer`: a deterministic OpenAI-compatible HTTP server on 127.0.0.1
  (chat completions, streaming, tool calls, embeddings, scripted failures and delays;
  Anthropic's messages API too).
- :class:`Reply`: what the fake server answers.
- :func:`hash_embedding` / :func:`bag_of_words_embedding`: the vectors its embeddings
  endpoint returns, so tests can compute expectations.
- :func:`approx_tokens` / :func:`common_prefix_length`: its token estimate and the
  prefix a prompt cache would reuse between two requests.

See ``docs/testing.md`` for a complete example.
"""

from __future__ import annotations

from memstrata.testing.embeddings import bag_of_words_embedding, cosine, hash_embedding
from memstrata.testing.fake_llm import FakeLLMServer, RecordedRequest
from memstrata.testing.replies import FakeToolCall, Reply
from memstrata.testing.wire import approx_tokens, common_prefix_length

__all__ = [
    "FakeLLMServer",
    "FakeToolCall",
    "RecordedRequest",
    "Reply",
    "approx_tokens",
    "bag_of_words_embedding",
    "common_prefix_length",
    "cosine",
    "hash_embedding",
]
