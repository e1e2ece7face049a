"""Query embeddings for search, fast: the model warm before the first question, few CPU
threads per query, and the last few thousand questions remembered.

A query is a dozen tokens: on one thread the local model embeds it in about 14 ms on torch and
5-7 ms on onnxruntime (memory/search/onnx_encoder.py, used when installed), steadily; with torch's
default of one spinning thread per core, a busy machine made the same call take up to 280 ms
at p95 (threads waiting for each other). The web process therefore runs torch on one thread
(workers keep torch's default for their batches) and onnxruntime on MEMORY_QUERY_THREADS
threads that sleep while they wait, and loads the model in the background as it starts, so
the first search does not wait for it.

The local model embeds on one thread of its own, always the same: onnxruntime costs about a
millisecond more on a thread it has not run on (and a web request gets a new thread each
time), and the search API starts a question's embedding as soon as the question is valid
(`prefetch`), so it runs while the request checks the person and writes its audit row.
A remote embedding service is called on the request's own thread, as it waits on the network.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings

from memory.search import embeddings

logger = logging.getLogger(__name__)

CACHE_SIZE = 2048
# A question's vector, or the embedding on its way (a failed one is forgotten).
_cache: OrderedDict[tuple[str, str], Future[list[float]]] = OrderedDict()
_lock = threading.Lock()
_local = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-embedding")


def _after_fork_in_child() -> None:
    """A forked process (gunicorn --preload, Celery prefork) inherits no threads: it gets an
    embedding thread of its own, and forgets embeddings that were on their way in its parent."""
    global _local, _lock
    _local = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-embedding")
    _lock = threading.Lock()
    for key, future in list(_cache.items()):
        if not future.done():
            del _cache[key]


os.register_at_fork(after_in_child=_after_fork_in_child)


def vector_for(query: str) -> tuple[list[float] | None, str]:
    """The query's embedding and the model's name, or (None, "") without a provider."""
    provider = embeddings.get_provider()
    text = (query or "").strip()
    if provider is None or not text:
        return None, ""
    future = _embedding(provider, text)
    try:
        return future.result(), provider.name
    except Exception:
        with _lock:
            if _cache.get((provider.name, text)) is future:
                del _cache[(provider.name, text)]
        raise


def prefetch(query: str) -> None:
    """Start embedding `query` with the local model, if it is not known yet: a search about to
    rank by it picks it up from `vector_for`."""
    provider = embeddings.get_provider()
    text = (query or "").strip()
    if isinstance(provider, embeddings.LocalProvider) and text:
        _embedding(provider, text)


def _embedding(provider: Any, text: str) -> Future[list[float]]:
    key = (provider.name, text)
    local = isinstance(provider, embeddings.LocalProvider)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
        future: Future[list[float]] = _local.submit(_embed, provider, text) if local else Future()
        _cache[key] = future
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    if not local:
        try:  # a remote service: here, on the request's thread (others asking wait for it)
            future.set_result(_embed(provider, text))
        except Exception as exc:  # noqa: BLE001 - the caller sees it from result()
            future.set_exception(exc)
    return future


def _embed(provider: Any, text: str) -> list[float]:
    if isinstance(provider, embeddings.LocalProvider):
        # A process not warmed as it started prepares the query encoder at its first query.
        _prepare_queries(provider)
        return provider.embed_query(text)
    return provider.embed([text])[0]


def _prepare_queries(provider: embeddings.LocalProvider) -> bool:
    """The onnxruntime encoder where settings ask for it (once per provider)."""
    if not settings.MEMORY_ONNX_QUERIES:
        return False
    return provider.prepare_queries(settings.VAR_DIR / "models", settings.MEMORY_QUERY_THREADS)


def prepare_web_process() -> None:
    """At web process start: the query encoder ready, and its first query run, on the thread
    that will embed every query, in the background. With the checked onnxruntime graph on
    disk that takes well under a second and torch never loads; without it torch loads (13-16 s
    on two cores, on one thread here), exports it and checks it."""
    _warm_in_background(batches=False)


def prepare_worker_process() -> None:
    """At Celery pool process start: the same, and torch loaded for the batches a worker
    embeds facts in (on its default threads), so neither a step's first recall nor the first
    embedding task waits for it to load."""
    _warm_in_background(batches=True)


def _warm_in_background(*, batches: bool) -> None:
    if not settings.MEMORY_WARM_QUERY_MODEL:
        return
    provider = embeddings.get_provider()
    if not isinstance(provider, embeddings.LocalProvider):
        return  # a remote service: nothing to load here
    if not batches:
        provider.torch_threads = 1

    def warm() -> None:
        started = time.monotonic()
        try:
            _prepare_queries(provider)
            provider.embed_query("warm up")
            if batches:
                provider.embed(["warm up"])
        except Exception:  # noqa: BLE001 - the first search loads it instead
            logger.warning("could not warm the embedding model", exc_info=True)
        else:
            logger.info("embedding model ready in %.1f s", time.monotonic() - started)

    _local.submit(warm)
