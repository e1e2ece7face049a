"""Fixtures of the memory tests: facts written through the services, in a tenant context."""

from __future__ import annotations

from typing import Any

import pytest

from memory.facts.remember import fact_remember
from memory.models import MemoryFact
from memory.search import indexing
from tenants.scope import tenant_scope

HX = {"HTTP_HX_REQUEST": "true"}
# On a test that loads the local embedding model in the test process (torch, sentence-
# transformers: ~20 s of CPU the first time in a process): `make test` runs these on one
# pytest-xdist worker (`--dist loadgroup`), so one worker pays for the model, not each. They
# are marked `slow` too: `make test-fast` loads no model.
uses_model = pytest.mark.xdist_group("embedding-model")


def remember(membership, text: str, category: str = "preference", **kwargs: Any) -> MemoryFact:
    """A fact about the member, written as the services write it."""
    with tenant_scope(membership.tenant_id):
        return fact_remember(
            tenant_id=membership.tenant_id,
            subject_id=membership.user_id,
            category=category,
            text=text,
            **kwargs,
        )


def facts_of(membership, *, live_only: bool = False) -> list[MemoryFact]:
    with tenant_scope(membership.tenant_id):
        rows = MemoryFact.objects.for_tenant(membership.tenant_id).filter(
            subject_id=membership.user_id
        )
        if live_only:
            rows = rows.filter(valid_until__isnull=True)
        return list(rows.order_by("valid_from"))


def embed_all(membership) -> int:
    """What the embedding task does on a worker, done here and now."""
    with tenant_scope(membership.tenant_id):
        ids = list(MemoryFact.objects.for_tenant(membership.tenant_id).values_list("pk", flat=True))
    return indexing.embed_facts(tenant_id=membership.tenant_id, fact_ids=ids).embedded


@pytest.fixture
def no_embeddings(settings):
    """A deployment without an embedding provider: full-text search only."""
    settings.MEMORY_EMBEDDING_PROVIDER = "none"
