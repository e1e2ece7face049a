"""Facts that other records mention by id (the memory items of a packed context): what each
says now and where a person can see it, for the principal looking.

Records keep a fact's id, never its text, so a fact the person deletes is gone everywhere. The
text and the link are given only to who may read that person's memories (`subject_for`: the
person themself, or a manager or admin while the tenant grants support access); anyone else
gets the id alone. The link is to the privacy page at the fact's current version.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from memory.models import MemoryFact
from memory.selectors import subject_for
from tenants.principal import Principal

KEPT, CORRECTED, GONE = "kept", "corrected", "gone"


@dataclass(frozen=True)
class Mention:
    """A mentioned fact as this principal may see it; `state` and `text` are empty, and `url`
    too, for someone who may not read the person's memories."""

    id: str
    state: str = ""  # KEPT, CORRECTED (a newer version stands), GONE (deleted or expired)
    text: str = ""  # the current version's text
    url: str = ""  # the privacy page at the current version (people signed in only)


def fact_mentions(
    principal: Principal, ids: Iterable[Any], *, subject_id: Any
) -> dict[str, Mention]:
    """For each id (a string) of a fact about `subject_id`, what this principal may know of it:
    everything or nothing. A fact no longer there (deleted with its history), or not about
    this person, is GONE."""
    wanted = {str(i) for i in ids if _is_uuid(i)}
    page = _page_for(principal, subject_id) if wanted and subject_id is not None else None
    if page is None:
        return {fact_id: Mention(fact_id) for fact_id in wanted}
    facts = MemoryFact.objects.for_tenant(principal.tenant).filter(subject_id=subject_id)
    lineages = dict(facts.filter(pk__in=wanted).values_list("id", "lineage"))
    current = {
        lineage: (str(pk), text)
        for pk, lineage, text in facts.filter(
            lineage__in=set(lineages.values()), valid_until__isnull=True
        )
        .exclude(expires_at__lte=timezone.now())
        .values_list("id", "lineage", "text")
    }
    found: dict[str, Mention] = {}
    for fact_id in wanted:
        now = current.get(lineages.get(uuid.UUID(fact_id)))
        if now is None:
            found[fact_id] = Mention(fact_id, state=GONE)
            continue
        url = f"{page}#fact-{now[0]}" if page else ""
        state = KEPT if now[0] == fact_id else CORRECTED
        found[fact_id] = Mention(fact_id, state=state, text=now[1], url=url)
    return found


def _page_for(principal: Principal, subject_id: Any) -> str | None:
    """The privacy page of `subject_id` for this principal ("" for an API key, which reads
    memories but has no pages), or None if it may not read that person's memories."""
    try:
        subject_for(principal, subject_id)
    except Http404:
        return None
    if principal.user is None:
        return ""
    page = reverse("memory:my_memory")
    return page if str(subject_id) == str(principal.user.pk) else f"{page}?subject={subject_id}"


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
