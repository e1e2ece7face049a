"""Search questions embedded on onnxruntime must land where torch puts them: the stored facts'
vectors come from torch, so any disagreement would quietly worsen every search."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memory.search import embeddings, onnx_encoder, query_vectors
from tests.memory.conftest import uses_model

pytestmark = [
    pytest.mark.skipif(not onnx_encoder.available(), reason="onnxruntime not installed"),
    uses_model,
    pytest.mark.slow,
]

QUESTIONS = [
    "When did Melanie go to the museum?",
    "refund",
    "Welche Farbe hat das Fahrrad? ¿Dónde está la estación? 東京はどこですか",
    "What did Caroline say about the adoption agency in her message from last summer?",
    # Past the model's 256-token window: both must cut it at the same place.
    " ".join(["a very long question about the customer's many orders"] * 60),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def prepared(models):
    """A provider of its own (not the process-wide one) with the encoder exported once."""
    provider = embeddings.LocalProvider()
    assert provider.prepare_queries(models, threads=2)
    return provider


def test_a_query_runs_on_the_threads_asked_for_and_they_sleep_while_they_wait(prepared):
    options = prepared._query_encoder._session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_onnx_encoder_gives_the_vectors_torch_gives(prepared):
    for question in QUESTIONS:
        fast = np.asarray(prepared.embed_query(question))
        slow = np.asarray(prepared.embed([question])[0])
        assert fast.shape == (384,)
        assert float(np.dot(fast, slow)) >= 0.9999, question


def test_the_exported_graph_is_reused_by_the_next_process(prepared, tmp_path_factory):
    cache = tmp_path_factory.mktemp("models-again")
    first = embeddings.LocalProvider()
    assert first.prepare_queries(cache)
    exported = list(cache.iterdir())
    assert len(exported) == 1 and exported[0].suffix == ".onnx"
    mtime = exported[0].stat().st_mtime_ns
    again = embeddings.LocalProvider()
    assert again.prepare_queries(cache)
    assert [p.stat().st_mtime_ns for p in cache.iterdir()] == [mtime]


def test_an_encoder_that_disagrees_with_torch_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_encoder, "MIN_AGREEMENT", 1.5)  # no cosine can reach it
    provider = embeddings.LocalProvider()
    assert provider.prepare_queries(tmp_path) is False
    assert provider.embed_query("refund") == provider.embed(["refund"])[0]


def test_an_export_that_fails_leaves_torch_answering(tmp_path, monkeypatch):
    def broken(model, path):
        path.write_bytes(b"not a model")  # a torn or foreign file where the graph should be

    monkeypatch.setattr(onnx_encoder, "_export", broken)
    provider = embeddings.LocalProvider()
    assert provider.prepare_queries(tmp_path) is False
    assert len(provider.embed_query("refund")) == 384


def test_search_queries_use_the_prepared_encoder(prepared, monkeypatch):
    monkeypatch.setattr(embeddings, "get_provider", lambda: prepared)
    calls = []
    encoder = prepared._query_encoder
    monkeypatch.setattr(encoder, "embed", lambda text: calls.append(text) or [0.0] * 384)
    query_vectors._cache.clear()
    vector, model = query_vectors.vector_for("a question never asked before")
    assert calls == ["a question never asked before"]
    assert model == prepared.name and len(vector) == 384


def test_a_prefetched_question_is_embedded_once_on_the_embedding_thread(prepared, monkeypatch):
    monkeypatch.setattr(embeddings, "get_provider", lambda: prepared)
    threads = []
    encoder = prepared._query_encoder
    monkeypatch.setattr(
        encoder, "embed", lambda text: threads.append(threading.current_thread().name) or [0.0]
    )
    query_vectors._cache.clear()
    query_vectors.prefetch("asked while the person is checked")
    vector, _ = query_vectors.vector_for(" asked while the person is checked ")
    assert vector == [0.0]
    assert len(threads) == 1 and threads[0].startswith("query-embedding")


def test_a_forked_process_embeds_on_a_thread_of_its_own(prepared, monkeypatch):
    # gunicorn --preload and Celery's prefork pool fork a process whose embedding thread
    # already ran: the child inherits no thread, and must not wait for one forever.
    monkeypatch.setattr(embeddings, "get_provider", lambda: prepared)
    monkeypatch.setattr(prepared._query_encoder, "embed", lambda text: [1.0])
    query_vectors._cache.clear()
    assert query_vectors.vector_for("asked in the parent") == ([1.0], prepared.name)
    pid = os.fork()
    if pid == 0:  # the child: answer within 10 s or be killed by the alarm
        signal.alarm(10)
        ok = query_vectors.vector_for("asked in the child") == ([1.0], prepared.name)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


LATER_PROCESS = """
import sys
from pathlib import Path
from memory.search.embeddings import LocalProvider
provider = LocalProvider()
ready = provider.prepare_queries(Path(sys.argv[1]))
vector = provider.embed_query(sys.argv[2])
print(json.dumps({"ready": ready, "torch": "torch" in sys.modules, "vector": vector}))
"""


def test_a_later_process_answers_queries_from_the_checked_graph_without_loading_torch(
    prepared, models
):
    question = "What does the customer prefer, email or phone?"
    found = subprocess.run(
        [sys.executable, "-c", "import json" + LATER_PROCESS, str(models), question],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    answer = json.loads(found.stdout.strip().splitlines()[-1])
    assert answer["ready"] is True and answer["torch"] is False, found.stderr[-2000:]
    torch_says = np.asarray(prepared.embed([question])[0])
    assert float(np.dot(np.asarray(answer["vector"]), torch_says)) >= 0.9999


def test_a_graph_that_no_longer_gives_its_recorded_vectors_is_not_trusted_without_torch(
    prepared, models, tmp_path
):
    import onnx

    (exported,) = models.iterdir()
    graph = onnx.load(str(exported))
    (entry,) = [p for p in graph.metadata_props if p.key == onnx_encoder.CHECKED_BY_TORCH]
    record = json.loads(entry.value)
    record["vectors"] = [[-x for x in vector] for vector in record["vectors"]]
    entry.value = json.dumps(record)
    onnx.save(graph, str(tmp_path / exported.name))
    model_dir = Path(prepared._path())
    assert onnx_encoder.open_checked(model_dir, tmp_path) is None
    shutil.copy(exported, tmp_path / exported.name)  # the file as exported passes
    assert onnx_encoder.open_checked(model_dir, tmp_path) is not None
