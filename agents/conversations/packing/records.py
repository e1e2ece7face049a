"""The per-step record of a packed context: what was included, what was dropped and why."""

from __future__ import annotations

from typing import Any

from agents.conversations.packing.packer import Packed

MAX_ITEMS = 400  # beyond this, dropped items are listed per section and reason


def item_rows(packed: Packed) -> list[dict[str, Any]]:
    """Every decision, in conversation order; long tails of drops are grouped."""
    rows: list[dict[str, Any]] = [
        {
            "section": i.section,
            "label": i.label,
            "tokens": i.tokens,
            "included": i.included,
            "reason": i.reason,
            "order": i.order,
            # Memory items: the facts they quote, by id (the text stays in the memory app).
            **({"facts": i.facts} if i.facts else {}),
        }
        for i in packed.items
    ]
    if len(rows) > MAX_ITEMS:
        kept = [r for r in rows if r["included"]]
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            if row["included"]:
                continue
            group = groups.setdefault(
                (row["section"], row["reason"]),
                {**row, "label": "", "tokens": 0, "count": 0, "facts": []},
            )
            group["tokens"] += row["tokens"]
            group["count"] += 1
        for group in groups.values():
            group["label"] = f"{group['count']} items"
        rows = kept + list(groups.values())
    rows.sort(key=lambda r: (r["order"] if r["section"] != "tools" else -10, r["section"]))
    return rows


def record_fields(packed: Packed) -> dict[str, Any]:
    """The columns of an agents.PackedContext row for `packed`."""
    return {
        "model": packed.model[:200],
        "encoding": packed.encoding + ("" if packed.exact_tokenizer else " (approximate)"),
        "budget": packed.budget,
        "reserve_output": packed.reserve_output,
        "tokens_used": packed.tokens_used,
        # A list, not an object: jsonb would not keep the sections in their order.
        "sections": [{"section": name, **row} for name, row in packed.sections().items()],
        "items": item_rows(packed),
    }
