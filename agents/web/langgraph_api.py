"""The REST endpoints `AgentStateSaver` (sdk/python) keeps LangGraph threads through:
checkpoints with their channel values, pending writes, deleting, copying and pruning threads.
Bytes travel as base64 and are never interpreted here; see agents/runtime/external.py. What a
graph saves per step goes through `POST langgraph/steps` (agents/web/langgraph_steps.py)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.runtime import external, external_threads
from agents.runtime.errors import ThreadDrivenElsewhere
from core import json_input
from core.api import ApiView, error_responses, validated
from core.serializers import JSONObjectField
from tenants.audit import audit_record
from tenants.idempotency import idempotent

TAGS = ["langgraph"]
# A graph's checkpoints and reads count in the tenant's own bucket, in steps (tenants may set
# their own rates): not the writes that start runs and cost model money.
BUCKET = "langgraph"


class Base64Field(serializers.CharField):
    """Bytes as standard base64 text ("" is no bytes)."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # CharField returns "" for a blank value without calling to_internal_value.
        text = super().run_validation(data)
        if isinstance(text, bytes):
            return text
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("Not base64.") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class BlobSerializer(serializers.Serializer):
    channel = serializers.CharField(max_length=200)
    version = serializers.CharField(max_length=100)
    type = serializers.CharField(max_length=50)
    blob = Base64Field(allow_blank=True, trim_whitespace=False)


class CheckpointPutSerializer(serializers.Serializer):
    thread_id = serializers.CharField(max_length=200)
    checkpoint_ns = serializers.CharField(max_length=200, allow_blank=True, default="")
    checkpoint_id = serializers.CharField(max_length=100)
    parent_checkpoint_id = serializers.CharField(max_length=100, allow_blank=True, default="")
    type = serializers.CharField(max_length=50)
    blob = Base64Field(trim_whitespace=False)
    metadata = JSONObjectField(default=dict)
    channel_versions = JSONObjectField(default=dict)
    blobs = BlobSerializer(many=True, default=list)
    preview = JSONObjectField(default=dict)
    step = serializers.CharField(max_length=100, allow_blank=True, default="")
    # The nodes LangGraph will run from this checkpoint (agents/runtime/graph_runs.py): none
    # means the graph reached its end. Left out by older clients.
    next = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=1000, required=False
    )


class WriteSerializer(serializers.Serializer):
    idx = serializers.IntegerField(min_value=-1000, max_value=1_000_000)
    channel = serializers.CharField(max_length=200)
    type = serializers.CharField(max_length=50)
    blob = Base64Field(allow_blank=True, trim_whitespace=False)


class InterruptSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=200)
    value = serializers.JSONField()


class WritesPutSerializer(serializers.Serializer):
    thread_id = serializers.CharField(max_length=200)
    checkpoint_ns = serializers.CharField(max_length=200, allow_blank=True, default="")
    checkpoint_id = serializers.CharField(max_length=100)
    task_id = serializers.CharField(max_length=200)
    task_path = serializers.CharField(max_length=500, allow_blank=True, default="")
    writes = WriteSerializer(many=True)
    # The values of `interrupt(...)` calls among the writes, as JSON (the bytes are opaque
    # here): one naming an `action` is an approval request.
    interrupts = InterruptSerializer(many=True, default=list)
    # A resume value the graph was given (`Command(resume=...)`, a write of the null task):
    # the interrupt ids it answers, or ["*"] for all of them.
    resumed = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=1000, required=False
    )
    # The error a task raised (an `__error__` write), in words.
    errors = serializers.ListField(
        child=serializers.CharField(max_length=2000, trim_whitespace=False),
        max_length=100,
        required=False,
    )


class CheckpointQuerySerializer(serializers.Serializer):
    thread_id = serializers.CharField(max_length=200, required=False)
    checkpoint_ns = serializers.CharField(max_length=200, required=False, allow_blank=True)
    checkpoint_id = serializers.CharField(max_length=100, required=False)
    before = serializers.CharField(max_length=100, required=False)
    limit = serializers.IntegerField(min_value=0, max_value=10_000, required=False)
    metadata = serializers.CharField(max_length=10_000, required=False)

    def validate_metadata(self, value: str) -> dict[str, Any]:
        try:
            parsed = json_input.loads(value)
        except ValueError as exc:
            raise serializers.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise serializers.ValidationError("A JSON object of metadata keys and values.")
        return parsed


class StoredBlobSerializer(serializers.Serializer):
    channel = serializers.CharField()
    version = serializers.CharField()
    type = serializers.CharField()
    blob = serializers.CharField(help_text="base64")


class StoredWriteSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    task_path = serializers.CharField()
    idx = serializers.IntegerField()
    channel = serializers.CharField()
    type = serializers.CharField()
    blob = serializers.CharField(help_text="base64")


class StoredCheckpointSerializer(serializers.Serializer):
    thread_id = serializers.CharField()
    checkpoint_ns = serializers.CharField()
    checkpoint_id = serializers.CharField()
    parent_checkpoint_id = serializers.CharField()
    type = serializers.CharField()
    blob = serializers.CharField(help_text="base64")
    metadata = serializers.JSONField()
    values = StoredBlobSerializer(many=True)
    writes = StoredWriteSerializer(many=True)
    run_id = serializers.UUIDField()


class CheckpointListSerializer(serializers.Serializer):
    results = StoredCheckpointSerializer(many=True)


class CheckpointSavedSerializer(serializers.Serializer):
    thread_id = serializers.CharField()
    checkpoint_ns = serializers.CharField()
    checkpoint_id = serializers.CharField()
    run_id = serializers.UUIDField()


class ThreadDecisionSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="the thread's run status")
    waiting = serializers.BooleanField(help_text="this interrupt waits for a person")
    request_id = serializers.UUIDField(help_text="the approval request of this interrupt")
    decision = serializers.JSONField(
        allow_null=True, help_text="the decision made on this interrupt's request, once made"
    )


class CheckpointsView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_checkpoints_list",
        tags=TAGS,
        parameters=[CheckpointQuerySerializer],
        responses={200: CheckpointListSerializer, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        """Checkpoints of the tenant's LangGraph threads, newest first, with their channel
        values and pending writes (the saver's get_tuple and list)."""
        query = validated(CheckpointQuerySerializer, request.query_params)
        found = external.external_checkpoints(
            principal=request.principal,
            thread_id=query.get("thread_id"),
            checkpoint_ns=query.get("checkpoint_ns"),
            checkpoint_id=query.get("checkpoint_id"),
            before=query.get("before"),
            metadata=query.get("metadata"),
            limit=query.get("limit"),
        )
        return Response({"results": [encoded(c) for c in found]})

    @extend_schema(
        operation_id="langgraph_checkpoints_put",
        tags=TAGS,
        request=CheckpointPutSerializer,
        responses={201: CheckpointSavedSerializer, **error_responses(400, 403, 404)},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        """Save a checkpoint (the same id again replaces it): idempotent by its id."""
        data = validated(CheckpointPutSerializer, request.data)
        _json_only(data["metadata"])
        try:
            saved = external.external_checkpoint_put(principal=request.principal, **data)
        except ThreadDrivenElsewhere as exc:
            return _refused(request, exc, data["thread_id"], "checkpoint")
        return Response(
            {
                "thread_id": saved.thread_id,
                "checkpoint_ns": saved.checkpoint_ns,
                "checkpoint_id": saved.checkpoint_id,
                "run_id": str(saved.run_id),
            },
            status=201,
        )


class WritesView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_writes_put",
        tags=TAGS,
        request=WritesPutSerializer,
        responses={204: None, **error_responses(400, 403, 404)},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        """Save a task's pending writes: idempotent by (checkpoint, task, index)."""
        data = validated(WritesPutSerializer, request.data)
        try:
            external.external_writes_put(principal=request.principal, **data)
        except ThreadDrivenElsewhere as exc:
            return _refused(request, exc, data["thread_id"], "writes")
        return Response(status=204)


class ThreadQuerySerializer(serializers.Serializer):
    thread_id = serializers.CharField(max_length=200)
    checkpoint_ns = serializers.CharField(max_length=200, required=False, allow_blank=True)
    interrupt_id = serializers.CharField(
        max_length=200, help_text="the id of the interrupt the graph is waiting on"
    )


class DecisionView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_decision",
        tags=TAGS,
        parameters=[ThreadQuerySerializer],
        responses={200: ThreadDecisionSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request) -> Response:
        """Whether one interrupt of the thread waits for a person's decision, and the decision
        made on that interrupt's own request (what `AgentStateSaver.decision` returns, to
        resume with `Command(resume=...)`); a decision on any other request is never given."""
        query = validated(ThreadQuerySerializer, request.query_params)
        found = external.external_decision(
            principal=request.principal,
            thread_id=query["thread_id"],
            checkpoint_ns=query.get("checkpoint_ns", ""),
            interrupt_id=query["interrupt_id"],
        )
        if found is None:
            return Response({"code": "not_found", "message": "No such thread."}, status=404)
        return Response(found)


class ThreadView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_thread_delete",
        tags=TAGS,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, thread_id: str) -> Response:
        """Forget a thread: every checkpoint, value and write of it. A thread that does not
        exist is already forgotten (204); one another key drives is 404 (admins may)."""
        try:
            external.external_thread_delete(principal=request.principal, thread_id=thread_id)
        except ThreadDrivenElsewhere as exc:
            return _refused(request, exc, thread_id, "delete")
        return Response(status=204)


def _refused(request: Request, exc: ThreadDrivenElsewhere, thread_id: str, verb: str) -> Response:
    """A write to a thread someone else drives: 404, nothing written but this audit row."""
    audit_record(
        tenant=request.principal.tenant,
        actor=request.principal,
        action="langgraph.write_refused",
        target_type="langgraph.thread",
        target_id=thread_id[:100],
        after={"verb": verb, "thread_id": thread_id, "code": exc.code},
    )
    return Response(exc.as_dict(), status=exc.status)


def encoded(found: dict[str, Any]) -> dict[str, Any]:
    return {
        **found,
        "blob": _b64(found["blob"]),
        "values": [{**v, "blob": _b64(v["blob"])} for v in found["values"]],
        "writes": [{**w, "blob": _b64(w["blob"])} for w in found["writes"]],
    }


def _json_only(metadata: dict[str, Any]) -> None:
    # Stored as jsonb and filtered on: it must survive a JSON round trip unchanged.
    json.dumps(metadata)


class CopyThreadSerializer(serializers.Serializer):
    source = serializers.CharField(max_length=200, trim_whitespace=False)
    target = serializers.CharField(max_length=200, trim_whitespace=False)


class DeleteRunsSerializer(serializers.Serializer):
    run_ids = serializers.ListField(
        child=serializers.CharField(max_length=200, trim_whitespace=False), max_length=10_000
    )


class PruneSerializer(serializers.Serializer):
    thread_ids = serializers.ListField(
        child=serializers.CharField(max_length=200, trim_whitespace=False), max_length=10_000
    )
    strategy = serializers.ChoiceField(choices=["keep_latest", "delete"], default="keep_latest")


class CountSerializer(serializers.Serializer):
    checkpoints = serializers.IntegerField()


class CopyThreadView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_thread_copy",
        tags=TAGS,
        request=CopyThreadSerializer,
        responses={200: CountSerializer, **error_responses(400, 403)},
    )
    def post(self, request: Request) -> Response:
        """Copy a thread (every namespace, checkpoint, value and pending write) to another
        thread id (the saver's copy_thread)."""
        data = validated(CopyThreadSerializer, request.data)
        copied = external_threads.external_thread_copy(principal=request.principal, **data)
        return Response({"checkpoints": copied})


class DeleteRunsView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_runs_delete",
        tags=TAGS,
        request=DeleteRunsSerializer,
        responses={200: CountSerializer, **error_responses(400, 403)},
    )
    def post(self, request: Request) -> Response:
        """Forget the checkpoints that these LangGraph run ids saved (metadata `run_id`), with
        their pending writes (the saver's delete_for_runs)."""
        data = validated(DeleteRunsSerializer, request.data)
        gone = external_threads.external_runs_delete(principal=request.principal, **data)
        return Response({"checkpoints": gone})


class PruneView(ApiView):
    rate_bucket = BUCKET

    @extend_schema(
        operation_id="langgraph_threads_prune",
        tags=TAGS,
        request=PruneSerializer,
        responses={200: CountSerializer, **error_responses(400, 403)},
    )
    def post(self, request: Request) -> Response:
        """Keep only the latest checkpoint of each namespace of these threads (`keep_latest`)
        or forget their checkpoints (`delete`) (the saver's prune)."""
        data = validated(PruneSerializer, request.data)
        gone = external_threads.external_threads_prune(principal=request.principal, **data)
        return Response({"checkpoints": gone})
