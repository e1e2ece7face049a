"""The record of what each model call received (agents.PackedContext rows), dressed for one
viewer: who answered the call, a bar of its tokens by section (sent and left out), and the
remembered facts its memory items quoted, named by key and category, with their text and a
link to them only for people who may see that person's memories (memory.facts.mentions).
"""

from __future__ import annotations

from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString

from agents.conversations.packing import packer
from agents.runtime import selectors
from agents.runtime.models import AgentSession, PackedContext, Run
from core import charts
from memory.facts.mentions import CORRECTED, GONE, fact_mentions
from tenants.principal import Principal

SECTIONS = [charts.Series(s, packer.LABELS[s]) for s in packer.SECTIONS]
TEXT_CHARS = 80  # a fact's text, shortened to one line


def records_for(principal: Principal, run: Run) -> list[PackedContext]:
    """The run's packed-context records, each with `answered`, `bar` and `memory_facts` (the
    facts its memory items quoted, as this principal may see them)."""
    records = list(selectors.packed_contexts(run))
    ids = {
        fact.get("id")
        for record in records
        for item in record.items
        for fact in item.get("facts") or []
        if fact.get("id")
    }
    mentions = fact_mentions(principal, ids, subject_id=_person(run)) if ids else {}
    for record in records:
        record.answered = answered(record)  # type: ignore[attr-defined]
        record.bar = token_bars(record)  # type: ignore[attr-defined]
        record.memory_facts = [  # type: ignore[attr-defined]
            {**_shown(fact, mentions), "included": item["included"], "reason": item["reason"]}
            for item in record.items
            for fact in item.get("facts") or []
        ]
        record.facts_hidden = any(  # type: ignore[attr-defined]
            not f["text"] and not f["gone"] for f in record.memory_facts
        )
    return records


def _person(run: Run) -> Any:
    """Whose memories the run's steps recall: the person its conversation is with."""
    if run.session_id is None:
        return None
    return (
        AgentSession.objects.for_tenant(run.tenant_id)
        .filter(pk=run.session_id)
        .values_list("user_id", flat=True)
        .first()
    )


def _shown(fact: dict[str, Any], mentions: dict[str, Any]) -> dict[str, Any]:
    mention = mentions.get(str(fact.get("id")))
    text = mention.text if mention else ""
    if len(text) > TEXT_CHARS:
        text = text[: TEXT_CHARS - 1].rstrip() + "…"
    return {
        "id": fact.get("id", ""),
        "key": fact.get("key", ""),
        "category": fact.get("category", ""),
        "tokens": fact.get("tokens", 0),
        "text": text,
        "url": mention.url if mention else "",
        "corrected": bool(mention and mention.state == CORRECTED),
        "gone": bool(mention and mention.state == GONE),
    }


def answered(record: PackedContext) -> str:
    """Who answered the call, in words: "scripted" or "openai, model gpt-4o-mini-2024-07-18"."""
    if not record.provider:
        return ""
    model = record.provider_model
    return record.provider if model in ("", record.provider) else f"{record.provider}, {model}"


def token_bars(record: PackedContext) -> SafeString:
    """Two bars on one scale: the tokens sent, and those left out, stacked by section."""
    sent = {row["section"]: row.get("tokens_included", 0) for row in record.sections}
    left = {row["section"]: row.get("tokens_dropped", 0) for row in record.sections}
    used, dropped = sum(sent.values()), sum(left.values())
    rows = [charts.Point("Sent", f"Sent: {charts.count(used)} tokens", sent)]
    if dropped:
        rows.append(charts.Point("Left out", f"Left out: {charts.count(dropped)} tokens", left))
    return charts.stacked_rows(
        id=f"context-bars-{record.seq}-{record.index}",
        title="Tokens by section",
        description=_describe(record, sent, dropped),
        series=SECTIONS,
        rows=rows,
        unit="tokens",
        empty="Nothing was packed.",
        table=_table(record),
    )


def _describe(record: PackedContext, sent: dict[str, int], dropped: int) -> str:
    share = record.tokens_used / record.budget * 100 if record.budget else 0
    parts = [
        f"{packer.LABELS.get(s, s).lower()} {charts.count(n)}"
        for s, n in sorted(sent.items(), key=lambda kv: -kv[1])
        if n
    ]
    text = f"{charts.count(record.tokens_used)} tokens sent ({share:.1f}% of the budget)"
    if parts:
        text += ": " + ", ".join(parts)
    return text + (f"; {charts.count(dropped)} left out." if dropped else ".")


def _table(record: PackedContext) -> str:
    """Per section: items and tokens sent and left out (the numbers behind the bars)."""
    rows = "".join(
        f'<tr><th scope="row">{escape(packer.LABELS.get(r["section"], r["section"]))}</th>'
        f'<td class="num">{r.get("included", 0)}</td>'
        f'<td class="num">{charts.count(r.get("tokens_included", 0))}</td>'
        f'<td class="num">{r.get("dropped", 0)}</td>'
        f'<td class="num">{charts.count(r.get("tokens_dropped", 0))}</td></tr>'
        for r in record.sections
    )
    return (
        '<table class="context-sections">'
        '<caption class="visually-hidden">Items and tokens per section</caption>'
        '<thead><tr><th scope="col">Section</th><th scope="col" class="num">Items sent</th>'
        '<th scope="col" class="num">Tokens</th><th scope="col" class="num">Left out</th>'
        '<th scope="col" class="num">Tokens</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
