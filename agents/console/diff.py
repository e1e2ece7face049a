"""A readable difference between two JSON states: one line per changed path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SHOWN = 300  # characters of a value shown in a line


@dataclass(frozen=True)
class Change:
    kind: str  # added | removed | changed
    path: str
    before: str = ""
    after: str = ""


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _walk(before: Any, after: Any, path: str, out: list[Change]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(Change("removed", sub, before=_show(before[key])))
            elif key not in before:
                out.append(Change("added", sub, after=_show(after[key])))
            else:
                _walk(before[key], after[key], sub, out)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            _walk(b, a, f"{path}[{i}]", out)
    elif before != after:
        out.append(Change("changed", path or "(state)", _show(before), _show(after)))


def state_diff(before: Any, after: Any) -> list[Change]:
    """What changed from `before` to `after`, by path (`orders[0].amount`), sorted."""
    out: list[Change] = []
    _walk(before, after, "", out)
    return out
