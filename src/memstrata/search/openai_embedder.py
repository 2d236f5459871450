"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint, via memstrata.llm.

The client comes from :func:`memstrata.llm.client_for` (or is handed in), so keys, base
URLs, retries and error mapping are the ones every other model call uses. The vector
length is learnt from the first answer when not given.
"""

from __future__ import annotations

from memstrata.errors import ConfigError, LLMResponseError
from memstrata.llm import LLMClient

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder:
    """An :class:`memstrata.search.embedders.Embedder` backed by ``client.embed``.

    The model is the client's ``embedding_model`` (``llm.embedding_model`` in the
    config; ``client_for()`` builds the client). ``name`` keys the stored vectors: it
    defaults to ``"openai:" + model`` so the vectors of two models never mix. ``dims``
    may be left at 0 to probe it with one short call.
    """

    def __init__(self, client: LLMClient, *, dims: int = 0, name: str = "") -> None:
        model = str(getattr(client, "embedding_model", "") or "")
        if not model:
            raise ConfigError(
                "OpenAIEmbedder needs the embedding model's name, e.g. text-embedding-3-small "
                "(set llm.embedding_model)."
            )
        self.client = client
        self.model = model
        self.name = name or f"openai:{model}"
        self.dims = dims if dims > 0 else len(self._call(["dimension probe"])[0])

    def _call(self, texts: list[str]) -> list[list[float]]:
        vectors = self.client.embed(texts)
        if len(vectors) != len(texts) or any(not v for v in vectors):
            raise LLMResponseError(
                f"The embedding endpoint returned {len(vectors)} vectors for {len(texts)} texts."
            )
        return vectors

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (one request for the whole list)."""
        if not texts:
            return []
        return self._call(list(texts))
