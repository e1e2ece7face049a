"""Query embeddings for search, fast: the model warm before the first question, one CPU thread
per query, and the last few thousand questions remembered.

A query is a dozen tokens: on one thread the local model embeds it in about 14 ms on torch and
7 ms on onnxruntime (memory/onnx_encoder.py, used when installed), steadily;
with torch's default of one thread per core, a busy machine made the same call take up to
280 ms at p95 (threads waiting for each other). The web process therefore embeds on one
thread (workers keep torch's default for their batches) and loads the model in the
background as it starts, so the first search does not wait for it.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from django.conf import settings

from memory import embeddings

logger = logging.getLogger(__name__)

CACHE_SIZE = 2048
_cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_lock = threading.Lock()


def vector_for(query: str) -> tuple[list[float] | None, str]:
    """The query's embedding and the model's name, or (None, "") without a provider."""
    provider = embeddings.get_provider()
    text = (query or "").strip()
    if provider is None or not text:
        return None, ""
    key = (provider.name, text)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found, provider.name
    embed_query = getattr(provider, "embed_query", None)
    vector = embed_query(text) if embed_query else provider.embed([text])[0]
    with _lock:
        _cache[key] = vector
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return vector, provider.name


def prepare_web_process() -> None:
    """At web process start: one thread per query, and the model loaded in the background."""
    if not settings.MEMORY_WARM_QUERY_MODEL:
        return
    provider = embeddings.get_provider()
    if not isinstance(provider, embeddings.LocalProvider):
        return  # a remote service: nothing to load here

    def warm() -> None:
        try:
            import torch

            torch.set_num_threads(1)
            if settings.MEMORY_ONNX_QUERIES:
                provider.prepare_queries(settings.VAR_DIR / "models")
            provider.embed_query("warm up")
        except Exception:  # noqa: BLE001 - the first search loads it instead
            logger.warning("could not warm the embedding model", exc_info=True)

    threading.Thread(target=warm, name="embedding-warm-up", daemon=True).start()
