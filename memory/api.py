"""REST endpoints of the memory app: facts of a subject (CRUD and search), export,
delete-all, and the one-time privacy link for a tenant's own app.

API keys act for any member of their tenant, and each read of a person's memories by a key is
audited (one event per request); a signed-in person acts for themselves, and a manager or admin
may read a member's facts while the tenant grants support access (audited). Privacy links log a
person in, so only an `admin` key makes them.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ApiView, error_responses, validated
from core.errors import AppError
from memory import selectors
from memory import serializers as s
from memory.facts import remember, services
from memory.models import SourceKind
from memory.privacy import links
from memory.search import query_vectors
from tenants.audit import audit_record
from tenants.errors import NotFound
from tenants.idempotency import idempotent
from tenants.models import Scope
from tenants.principal import Principal
from tenants.read_audit import audit_read

TAGS = ["memory"]
# What a key's reads of a person's memories are audited as.
READ_BY_KEY = "memory.read_by_api_key"
EXPORTED = "memory.exported"


def _subject(
    request: Request,
    subject_id: Any,
    *,
    write: bool = False,
    read_action: str = READ_BY_KEY,
    durable: bool = False,
) -> Any:
    """The subject this caller may act for; 404 otherwise. Support and API-key reads are
    audited (a key's as `read_action`); a GET's audit row is written after its transaction
    commits, in one of its own (tenants/read_audit.py), unless the GET writes too (`durable`)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    subject = selectors.subject_for(principal, subject_id)
    own = principal.user is not None and subject.pk == principal.user.pk
    if principal.user is not None and not own:
        if write:
            raise NotFound()  # support access is read-only
        _audit_read(request, "memory.support_viewed", subject.pk, durable=durable)
    elif principal.user is None and not write:
        _audit_read(request, read_action, subject.pk, durable=durable)
    return subject


def _audit_read(request: Request, action: str, subject_id: Any, *, durable=False) -> None:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    fast = request.method in ("GET", "HEAD") and not durable
    record = audit_read if fast else audit_record
    record(
        tenant=principal.tenant,
        actor=principal,
        action=action,
        target_type="auth.user",
        target_id=str(subject_id),
    )


class SubjectLookupView(ApiView):
    @extend_schema(
        operation_id="memory_subject_lookup",
        tags=TAGS,
        parameters=[s.SubjectLookupQuerySerializer],
        responses={200: s.SubjectSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request) -> Response:
        """The subject id of the tenant's member with this username (for clients that know
        people by name, like the LangGraph store in sdk/python); 404 for anyone else."""
        query = validated(s.SubjectLookupQuerySerializer, request.query_params)
        subject = selectors.subject_by_username(request.principal, query["username"])
        return Response({"id": subject.pk, "username": subject.get_username()})


class SubjectFactsView(ApiView):
    rate_bucket = {"POST": "write"}

    @extend_schema(
        operation_id="memory_facts_list",
        tags=TAGS,
        parameters=[s.FactListQuerySerializer],
        responses={200: s.FactListSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request, subject_id: int) -> Response:
        """The subject's live facts, newest first per category (only `key`'s, or those of
        `ids`, when asked). With `refresh_ttl`, those with a TTL of their own expire that long
        from now again (a read that writes: any key that may read may do it, and the
        category's TTL still bounds it)."""
        query = validated(s.FactListQuerySerializer, request.query_params)
        refresh = query["refresh_ttl"]
        subject = _subject(request, subject_id, durable=refresh)
        tenant_id = request.principal.tenant.pk
        facts = selectors.live_facts(
            tenant_id=tenant_id, subject_id=subject.pk, key=query.get("key"), ids=query.get("ids")
        )
        own = request.principal.user is not None and subject.pk == request.principal.user.pk
        if refresh and (own or request.principal.user is None):  # support access only looks
            services.facts_refresh_ttl(tenant_id=tenant_id, facts=facts)
        return Response({"results": [selectors.fact_json(f) for f in facts]})

    @extend_schema(
        operation_id="memory_facts_create",
        tags=TAGS,
        request=s.FactCreateSerializer,
        responses={
            201: s.FactSerializer,
            200: s.FactSerializer,
            **error_responses(400, 403, 404, 422),
        },
    )
    @idempotent
    def post(self, request: Request, subject_id: int) -> Response:
        """Remember a fact about the subject (same key supersedes). The same fact again, or a
        near-duplicate of a live one, refreshes that one: 200 with `merged_into` its id."""
        subject = _subject(request, subject_id, write=True)
        data = validated(s.FactCreateSerializer, request.data)
        own = request.principal.user is not None
        fact = remember.fact_remember(
            tenant_id=request.principal.tenant.pk,
            subject_id=subject.pk,
            source_kind=SourceKind.USER if own else SourceKind.API,
            **data,
        )
        if getattr(fact, "merged_into", None) is not None:
            return Response({**selectors.fact_json(fact), "merged_into": str(fact.merged_into)})
        return Response(selectors.fact_json(fact), status=201)


class NamespacesView(ApiView):
    @extend_schema(
        operation_id="memory_namespaces",
        tags=TAGS,
        parameters=[s.NamespacesQuerySerializer],
        responses={200: s.NamespacesSerializer, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        """The LangGraph store's namespaces that the tenant's live facts form,
        `["memories", username, category]`, filtered by `prefix` / `suffix` (`*` matches any
        label), cut to `max_depth`, sorted, paged by `limit` and `offset`. A key sees every
        member's (audited); a person, their own."""
        query = validated(s.NamespacesQuerySerializer, request.query_params)
        principal: Principal = request.principal  # type: ignore[attr-defined]
        if principal.user is None:
            audit_read(
                tenant=principal.tenant,
                actor=principal,
                action="memory.namespaces_listed_by_api_key",
                target_type="tenants.tenant",
                target_id=str(principal.tenant.pk),
            )
        found = selectors.namespaces(
            tenant_id=principal.tenant.pk,
            subject_id=principal.user.pk if principal.user is not None else None,
            prefix=tuple(query.get("prefix", ())),
            suffix=tuple(query.get("suffix", ())),
            max_depth=query.get("max_depth"),
            limit=query["limit"],
            offset=query["offset"],
        )
        return Response({"namespaces": [list(ns) for ns in found]})


class SubjectFactsBatchView(ApiView):
    rate_bucket = "write"

    @extend_schema(
        operation_id="memory_facts_batch",
        tags=TAGS,
        request=s.FactBatchSerializer,
        responses={200: s.FactBatchResultSerializer, **error_responses(400, 403, 404, 413)},
    )
    @idempotent
    def post(self, request: Request, subject_id: int) -> Response:
        """Remember up to 500 facts about the subject, each as the single POST would in turn.
        Answers 200 with one result per item, in order: 201 written, 200 the same fact
        refreshed, or the single POST's error (the item wrote nothing). A body that is not a
        list of 1 to 500 facts is a 400 and writes nothing."""
        subject = _subject(request, subject_id, write=True)
        items = validated(s.FactBatchSerializer, request.data)["facts"]
        results: list[dict[str, Any]] = [{} for _ in items]
        accepted: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            form = s.FactCreateSerializer(data=item)
            if form.is_valid():
                accepted.append((index, dict(form.validated_data)))
            else:  # the body of the single POST's 400
                error = {"code": "invalid", "message": "Some fields are invalid."}
                results[index] = {"status": 400, "error": {**error, "fields": form.errors}}
        outcomes = remember.facts_remember(
            tenant_id=request.principal.tenant.pk,
            subject_id=subject.pk,
            facts=[data for _, data in accepted],
            source_kind=SourceKind.USER if request.principal.user is not None else SourceKind.API,
        )
        for (index, _), outcome in zip(accepted, outcomes, strict=True):
            results[index] = _batch_result(outcome)
        return Response(_batch_body(results))


def _batch_result(outcome: remember.Remembered | AppError) -> dict[str, Any]:
    if isinstance(outcome, AppError):
        return {"status": outcome.status, "error": outcome.as_dict()}
    return {"status": 201 if outcome.created else 200, "fact": selectors.fact_json(outcome.fact)}


def _batch_body(results: list[dict[str, Any]]) -> dict[str, Any]:
    statuses = [r["status"] for r in results]
    return {
        "created": statuses.count(201),
        "refreshed": statuses.count(200),
        "refused": sum(1 for code in statuses if code >= 400),
        "results": [{"index": index, **r} for index, r in enumerate(results)],
    }


def _fact(request: Request, fact_id: Any, *, write: bool = False):
    principal: Principal = request.principal  # type: ignore[attr-defined]
    if principal.user is not None:
        return selectors.fact_for(principal, fact_id)  # a person: their own facts only
    fact = selectors.fact_in_tenant(principal, fact_id)
    if not write:
        _audit_read(request, READ_BY_KEY, fact.subject_id)
    return fact


class FactView(ApiView):
    rate_bucket = {"PATCH": "write", "DELETE": "write"}

    @extend_schema(
        operation_id="memory_facts_retrieve",
        tags=TAGS,
        responses={200: s.FactSerializer, **error_responses(404)},
    )
    def get(self, request: Request, fact_id: Any) -> Response:
        """One fact (live or a past version)."""
        return Response(selectors.fact_json(_fact(request, fact_id)))

    @extend_schema(
        operation_id="memory_facts_update",
        tags=TAGS,
        request=s.FactEditSerializer,
        responses={200: s.FactSerializer, **error_responses(400, 404, 409, 422)},
    )
    def patch(self, request: Request, fact_id: Any) -> Response:
        """Correct a fact: answers the new version; the old one is kept as history."""
        fact = _fact(request, fact_id, write=True)
        data = validated(s.FactEditSerializer, request.data)
        new = services.fact_edit(actor=request.principal, fact=fact, text=data["text"])
        return Response(selectors.fact_json(new))

    @extend_schema(
        operation_id="memory_facts_destroy",
        tags=TAGS,
        responses={204: None, **error_responses(404)},
    )
    def delete(self, request: Request, fact_id: Any) -> Response:
        """Forget a fact completely: every version, its embedding, summaries quoting it."""
        services.fact_delete(actor=request.principal, fact=_fact(request, fact_id, write=True))
        return Response(status=204)


class SearchView(ApiView):
    @extend_schema(
        operation_id="memory_search",
        tags=TAGS,
        parameters=[s.SearchQuerySerializer],
        responses={200: s.SearchResultSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request, subject_id: int) -> Response:
        """The subject's facts most relevant to `q` (hybrid, or full text without embeddings)."""
        query = validated(s.SearchQuerySerializer, request.query_params)
        query_vectors.prefetch(query["q"])  # embedded while the person is checked and audited
        subject = _subject(request, subject_id)
        found = selectors.search_facts(
            tenant_id=request.principal.tenant.pk,
            subject_id=subject.pk,
            query=query["q"],
            limit=query["limit"],
        )
        return Response(found)  # already JSON-ready; SearchResultSerializer documents it


class ExportView(ApiView):
    @extend_schema(
        operation_id="memory_export", tags=TAGS, responses={200: dict, **error_responses(404)}
    )
    def get(self, request: Request, subject_id: int) -> Response:
        """Everything remembered about the subject, with history, and their transcripts."""
        subject = _subject(request, subject_id, read_action=EXPORTED)
        return Response(selectors.export(tenant_id=request.principal.tenant.pk, subject=subject))


class DeleteAllView(ApiView):
    rate_bucket = "write"

    @extend_schema(
        operation_id="memory_delete_all",
        tags=TAGS,
        request=None,
        responses={200: s.DeletedSerializer, **error_responses(404)},
    )
    @idempotent
    def post(self, request: Request, subject_id: int) -> Response:
        """Forget everything remembered about the subject in this tenant."""
        subject = _subject(request, subject_id, write=True)
        deleted = services.facts_delete_all(
            actor=request.principal, tenant_id=request.principal.tenant.pk, subject_id=subject.pk
        )
        return Response({"deleted": deleted})


class PrivacyLinkView(ApiView):
    # The link logs its holder in as the person: as strong as an admin's key, never a write's.
    write_scope = Scope.ADMIN
    rate_bucket = "write"

    @extend_schema(
        operation_id="memory_privacy_link_create",
        tags=TAGS,
        request=None,
        responses={201: s.PrivacyLinkSerializer, **error_responses(403, 404)},
    )
    def post(self, request: Request, subject_id: int) -> Response:
        """A signed one-time link (relative URL) that opens the end user's privacy page."""
        principal: Principal = request.principal  # type: ignore[attr-defined]
        if principal.user is not None:
            raise NotFound()  # for integrations: people open their page themselves
        subject = selectors.subject_for(principal, subject_id)
        url, expires_in = links.link_make(tenant_id=principal.tenant.pk, subject_id=subject.pk)
        audit_record(
            tenant=principal.tenant,
            actor=principal,
            action="memory.privacy_link_made",
            target_type="auth.user",
            target_id=str(subject.pk),
        )
        return Response({"url": url, "expires_in": expires_in}, status=201)
