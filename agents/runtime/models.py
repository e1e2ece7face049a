"""Conversations, runs and everything a run needs to resume: all rows, all tenant-owned."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from core import ids
from core.fields import CountField, counts_not_negative
from tenants.models import Tenant, TenantOwned, TenantQuerySet


class SessionStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    CLOSED = "closed", "Closed"


class AgentSession(TenantOwned):
    """A conversation between one end user and one agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    agent = models.CharField(max_length=100)
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=16, choices=SessionStatus.choices, default=SessionStatus.ACTIVE
    )
    summary = models.TextField(blank=True)
    # The summary stands for the first `summary_upto` messages of this thread's context
    # (inherited ones included); the messages themselves stay for audit.
    summary_upto = models.PositiveIntegerField(default=0)
    summary_updated_at = models.DateTimeField(null=True, blank=True)
    # A fork sees its parent's context up to message `fork_seq` of the parent, then its own
    # messages; nothing is copied. `inherited_messages` counts what it sees of its ancestors.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="forks",
        db_constraint=False,  # (parent, tenant) -> (id, tenant): DISTRIBUTED_FOREIGN_KEYS
    )
    fork_seq = models.PositiveIntegerField(null=True, blank=True)
    inherited_messages = models.PositiveIntegerField(default=0)
    token_count = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveIntegerField(default=0)  # seq of the newest message
    version = models.PositiveIntegerField(default=1)
    # A LangGraph thread's driver ("key:<api key id>" or "user:<user id>"): only it writes
    # the thread (agents/runtime/external.py). Blank for every other conversation.
    driver = models.CharField(max_length=100, blank=True, default="", db_default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "user", "-created_at"])]
        constraints = [
            # A LangGraph thread (agents/runtime/external.py) is one session, however many
            # of its first writes race.
            models.UniqueConstraint(
                fields=["tenant", "title"],
                condition=models.Q(agent="langgraph"),
                name="session_unique_external_thread",
            )
        ]

    def __str__(self) -> str:
        return self.title or f"{self.agent} conversation"


class MessageRole(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool"


class Message(TenantOwned):
    """Append-only transcript. Checkpoints point into it by seq; they never copy it."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: message_unique_seq (session, seq) serves every lookup by session.
    session = models.ForeignKey(
        AgentSession,
        on_delete=models.CASCADE,
        related_name="messages",
        db_index=False,
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    run = models.ForeignKey(
        "Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    content = models.TextField(blank=True)
    tool_call = models.JSONField(null=True, blank=True)
    tool_result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq", "tenant"], name="message_unique_seq")
        ]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    WAITING_TIMER = "waiting_timer", "Waiting for a timer"
    WAITING_EVENT = "waiting_event", "Waiting for an event"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


RUNNABLE = (RunStatus.QUEUED, RunStatus.RUNNING)
WAITING = (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_TIMER, RunStatus.WAITING_EVENT)
FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class Run(TenantOwned):
    """One execution of an agent. `version` is the fencing token every write checks."""

    # Time-ordered (UUID v7): the id says when the run was made, and its per-run rows are
    # kept in the partition of that month (core/partitions.py).
    id = models.UUIDField(primary_key=True, default=ids.uuid7, editable=False)
    # The indexes below all start with the tenant; a separate one would only slow writes.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    session = models.ForeignKey(
        AgentSession,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="runs",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    agent = models.CharField(max_length=100)
    agent_version = CountField()
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    current_step = models.CharField(max_length=100)
    step_seq = CountField(default=0)  # seq of the latest checkpoint
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempts = CountField(default=0)  # of the current step
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When the recovery sweep took the run back from a worker that died holding it; cleared
    # by the claim that recovers it (a run with lost_at is "lost, recovering").
    lost_at = models.DateTimeField(null=True, blank=True)
    # When a worker claimed it again after its worker was lost (the latest such claim).
    recovered_at = models.DateTimeField(null=True, blank=True)
    version = CountField(default=1)
    state_schema_version = CountField(default=1)
    not_before = models.DateTimeField(null=True, blank=True)  # retry backoff or timer
    # When the run last entered the queue (started, a step yielded, a retry, a resume, a
    # requeue): set by the database itself (engine/sql/queued_at_v1.sql) on every write that
    # makes a run queued, so no writer can forget it. NULL for a run never queued since.
    queued_at = models.DateTimeField(null=True, blank=True, editable=False)
    waiting_for = models.CharField(max_length=100, blank=True)  # event name or approval id
    wake_payload = models.JSONField(null=True, blank=True)  # event or decision for next step
    cancel_requested = models.BooleanField(default=False)
    # Number of the run's latest RunEvent: bumped in the transaction that writes the event.
    event_seq = CountField(default=0, db_default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # An admin marked a stuck or failed run as dealt with (the admin console hides it from
    # the stuck list); cleared when the run changes status again.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    resolution_note = models.TextField(blank=True, default="", db_default="")

    class Meta:
        indexes = [
            # Keyset pagination: ORDER BY created_at DESC, id DESC within a tenant.
            models.Index(fields=["tenant", "-created_at", "-id"], name="run_tenant_recent"),
            models.Index(fields=["tenant", "status", "-created_at"], name="run_tenant_status"),
            models.Index(
                fields=["status", "lease_expires_at"],
                name="run_expired_leases",
                condition=models.Q(status="running"),
            ),
            models.Index(
                fields=["status", "not_before"],
                name="run_due",
                condition=models.Q(status__in=["queued", "waiting_timer"]),
            ),
            # Cross-tenant stuck detection (beat, /metrics): the runs that are not done are a
            # small slice of a large table. Only status is indexed, so a run that keeps
            # running still updates heap-only.
            models.Index(
                fields=["status"],
                name="run_open_by_status",
                condition=~models.Q(status__in=["succeeded", "cancelled"]),
            ),
            # Runs taken back from a dead worker and not yet claimed again (the claim clears
            # lost_at): the console's "recovering now" count reads these few, not every queued
            # run of a large tenant (43 ms at 50,000 queued).
            models.Index(
                fields=["tenant"],
                name="run_recovering",
                condition=models.Q(lost_at__isnull=False),
            ),
        ]
        constraints = [
            counts_not_negative(
                "run_counts_not_negative",
                "agent_version",
                "step_seq",
                "attempts",
                "version",
                "state_schema_version",
                "event_seq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} run {self.id}"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED


class RunCount(TenantOwned):
    """How many of a tenant's runs are in each status, as deltas: triggers on `agents_run`
    (sql/run_counts_triggers.sql) add a row per change (+1 for a run that entered a status,
    -1 for one that left it) and never update one, so writers never wait for each other; a
    status's count is the sum of its rows (exact at any moment, in one indexed read), and
    `agents.compact_run_counts` (beat) folds each tenant's rows into one per status."""

    id = models.BigAutoField(primary_key=True)
    # No foreign key: a tenant being deleted deletes its runs, whose triggers write rows for
    # it after its own were deleted; the compaction removes those (and any of a tenant gone).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False,
        db_index=False,
    )  # fmt: skip
    status = models.CharField(max_length=20, choices=RunStatus.choices)
    n = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "status"], name="runcount_tenant_status")]


class StuckCount(TenantOwned):
    """How many of a tenant's runs were stuck for each reason (agents/console/stuck.py) when
    the stuck sweep (beat) last counted every tenant; a reason with none has no row. Pages
    read these instead of scanning a large tenant's open runs (the rule: `stored_counts`)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    reason = models.CharField(max_length=40)
    n = models.PositiveIntegerField()
    counted_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "reason"], name="stuckcount_tenant_reason")
        ]


class Checkpoint(TenantOwned):
    """State after a step. Append-only; the transcript stays in Message rows."""

    id = models.BigAutoField(primary_key=True)
    # Written once per step, like RunEvent: (run, seq) is the only index and there are no
    # foreign-key triggers on the hot path. Only agents_persist_step inserts rows, from the
    # run row it has just updated (the tenant is the run's; RLS checks it); the ORM deletes
    # them with their run (delete runs through the ORM, never with raw SQL).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="checkpoints",
        db_index=False,
        db_constraint=False,
    )
    seq = CountField()
    step = models.CharField(max_length=100)  # the step that produced this state
    next_step = models.CharField(max_length=100, blank=True)
    state = models.JSONField(default=dict)
    schema_version = CountField()
    messages_upto = CountField(default=0)  # transcript read up to this seq
    created_at = models.DateTimeField(auto_now_add=True)
    # A checkpoint the engine wrote is also the record of the attempt that produced it and
    # of that step's step.finished event (StepAttempt rows are kept for attempts that wrote
    # no checkpoint: retried, failed, lost). Checkpoints written by an admin's repair
    # (replay, state edit) leave these empty.
    attempt = CountField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="", db_default="")
    started_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    event_seq = CountField(null=True, blank=True)  # its step.finished event
    status = models.CharField(max_length=20, blank=True, default="", db_default="")  # run's, after
    # What the step appended to the run's logs ({key: [items]}, `ctx.append`): a log is
    # stored once, piece by piece, rather than copied into every checkpoint's state.
    appended = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq", "tenant"], name="checkpoint_unique_seq"),
            counts_not_negative(
                "checkpoint_counts_not_negative",
                "seq",
                "schema_version",
                "messages_upto",
                "attempt",
                "event_seq",
            ),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"checkpoint {self.seq} of {self.run_id}"


class RunEvent(TenantOwned):
    """What happened to a run, numbered 1, 2, 3... per run, written in the transaction that
    did it; live pages catch up from here after a reconnect (see agents/live/)."""

    id = models.BigAutoField(primary_key=True)
    # One row per step on the engine's hot path, so one index and no foreign-key triggers:
    # (run, seq) serves every read (RLS adds the tenant); only the engine's own statements
    # write rows, with the ids of the run row they update; the ORM deletes them with the run.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq", "tenant"], name="runevent_unique_seq")
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"event {self.seq} of {self.run_id}: {self.kind}"


class RunEventLog(models.Model):
    """Every event of a run, in order: the rows of RunEvent and the step.finished events
    that the engine's checkpoints carry (a read-only view, agents_runevent_log, with the
    caller's row-level security). Read events here; write them with agents.runtime.progress."""

    pk = models.CompositePrimaryKey("run", "seq")
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    objects = TenantQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = "agents_runevent_log"
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"event {self.seq} of {self.run_id}: {self.kind}"


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    RETRYING = "retrying", "Failed, will retry"
    FAILED = "failed", "Failed"
    LOST = "lost", "Worker lost"
    FENCED = "fenced", "Superseded by another worker"


class StepAttempt(TenantOwned):
    id = models.BigAutoField(primary_key=True)
    # Written once per step, like Checkpoint: (run, seq) is the only index, no FK triggers.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="attempts_log",
        db_index=False,
        db_constraint=False,
    )
    seq = models.PositiveIntegerField()  # the checkpoint seq this attempt would write
    attempt = models.PositiveIntegerField()
    step = models.CharField(max_length=100)
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error_class = models.CharField(max_length=200, blank=True)
    error_code = models.CharField(max_length=100, blank=True)
    message = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0)

    class Meta:
        ordering = ["run", "seq", "attempt"]
        indexes = [models.Index(fields=["run", "seq"])]

    def __str__(self) -> str:
        return f"{self.step} #{self.attempt}: {self.outcome}"


class ToolCallStatus(models.TextChoices):
    INTENT = "intent", "Intent recorded, outcome unknown"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class ToolCall(TenantOwned):
    """The ledger of side-effecting tool calls: intent before the call, outcome after."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: toolcall_unique_position (run, seq, call_index) serves it.
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="tool_calls",
        db_index=False,
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    seq = models.PositiveIntegerField()
    call_index = models.PositiveIntegerField()
    tool = models.CharField(max_length=100)
    idempotency_key = models.CharField(max_length=255)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=ToolCallStatus.choices)
    result = models.JSONField(null=True, blank=True)
    sends = models.PositiveIntegerField(default=0)  # how often the call went out
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "seq", "call_index", "tenant"], name="toolcall_unique_position"
            )
        ]
        ordering = ["run", "seq", "call_index"]

    def __str__(self) -> str:
        return f"{self.tool} [{self.idempotency_key}] {self.status}"


class PackedContext(TenantOwned):
    """What one model call of one step was given and what was left out, and why: written in
    the transaction that persists the step (ctx.pack), so exactly once with it."""

    id = models.BigAutoField(primary_key=True)
    # Like Checkpoint: (run, seq, index) is the only index; RLS checks the tenant on insert.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="packed_contexts",
        db_index=False,
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    seq = models.PositiveIntegerField()  # the checkpoint seq of the step
    index = models.PositiveSmallIntegerField(default=0)  # which pack within the step
    step = models.CharField(max_length=100)
    model = models.CharField(max_length=200, blank=True)  # the tokens were counted for it
    # Who answered the call the context was packed for ("scripted", "openai") and the model
    # the reply names; blank when no call followed, and in records from before they were kept.
    provider = models.CharField(max_length=100, blank=True, default="", db_default="")
    provider_model = models.CharField(max_length=200, blank=True, default="", db_default="")
    encoding = models.CharField(max_length=100)
    budget = models.PositiveIntegerField()  # the model's window minus the output reserve
    reserve_output = models.PositiveIntegerField(default=0)
    tokens_used = models.PositiveIntegerField()
    sections = models.JSONField(default=list)  # per section: included/dropped counts and tokens
    items = models.JSONField(default=list)  # every decision: section, label, tokens, reason
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "seq", "index", "tenant"], name="packedcontext_unique_position"
            )
        ]
        ordering = ["run", "seq", "index"]

    def __str__(self) -> str:
        return f"context of step {self.seq} of {self.run_id}: {self.tokens_used}/{self.budget}"


# --- checkpoints of agents that run elsewhere (LangGraph through sdk/python) ---------------------


class ExternalCheckpoint(TenantOwned):
    """A checkpoint a LangGraph thread saved through `AgentStateSaver`: its identity in that
    framework and its exact serialized bytes. The readable side is an ordinary Checkpoint of
    the thread's run (one run per thread and namespace), so the same pages show it."""

    id = models.BigAutoField(primary_key=True)
    # No foreign-key triggers (as the engine's per-step rows): written at every step of a
    # graph, and deleting runs would check them row by row with no index on run_id. Deleting
    # a run or a tenant deletes them all the same (Django's cascade, external_threads).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    # The readable side: its state preview, step and place in the run's timeline.
    shown_as = models.ForeignKey(  # one each: externalcheckpoint_unique_shown_as
        Checkpoint, on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    thread_id = models.CharField(max_length=200)
    checkpoint_ns = models.CharField(max_length=200, blank=True)
    checkpoint_id = models.CharField(max_length=100)
    parent_checkpoint_id = models.CharField(max_length=100, blank=True)
    type = models.CharField(max_length=50)
    blob = models.BinaryField()
    metadata = models.JSONField(default=dict)
    channel_versions = models.JSONField(default=dict)  # which ExternalBlob versions it reads
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "thread_id", "checkpoint_ns", "checkpoint_id"],
                name="externalcheckpoint_unique_id",
            ),
            models.UniqueConstraint(
                fields=["shown_as", "tenant"], name="externalcheckpoint_unique_shown_as"
            ),
        ]


class ExternalBlob(TenantOwned):
    """One version of one channel's value of an external thread (checkpoints name versions)."""

    id = models.BigAutoField(primary_key=True)
    # No foreign-key triggers (as the engine's per-step rows): written at every step of a
    # graph, and deleting runs would check them row by row with no index on run_id. Deleting
    # a run or a tenant deletes them all the same (Django's cascade, external_threads).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    thread_id = models.CharField(max_length=200)
    checkpoint_ns = models.CharField(max_length=200, blank=True)
    channel = models.CharField(max_length=200)
    version = models.CharField(max_length=100)
    type = models.CharField(max_length=50)
    blob = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "thread_id", "checkpoint_ns", "channel", "version"],
                name="externalblob_unique_version",
            )
        ]


class ExternalWrite(TenantOwned):
    """A pending write of a task of an external thread, saved before its next checkpoint."""

    id = models.BigAutoField(primary_key=True)
    # No foreign-key triggers (as the engine's per-step rows): written at every step of a
    # graph, and deleting runs would check them row by row with no index on run_id. Deleting
    # a run or a tenant deletes them all the same (Django's cascade, external_threads).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    thread_id = models.CharField(max_length=200)
    checkpoint_ns = models.CharField(max_length=200, blank=True)
    checkpoint_id = models.CharField(max_length=100)
    task_id = models.CharField(max_length=200)
    task_path = models.CharField(max_length=500, blank=True)
    idx = models.IntegerField()
    channel = models.CharField(max_length=200)
    type = models.CharField(max_length=50)
    blob = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="externalwrite_unique_idx",
            )
        ]


class WebhookEndpoint(TenantOwned):
    """Where the tenant wants to hear about decisions on its LangGraph threads, so a graph
    waiting on `interrupt()` resumes when told instead of polling. Each delivery is signed
    with `secret` (HMAC-SHA256; shown once when the endpoint is made)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=list)
    description = models.CharField(max_length=200, blank=True)
    created_by_label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    disabled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="webhook_tenant_recent")]

    def __str__(self) -> str:
        return self.url


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(TenantOwned):
    """One event for one endpoint: written in the transaction that made the event, sent after
    it commits, tried again with backoff until the endpoint answers 2xx (at least once; the
    id, sent as `AgentState-Delivery`, lets the receiver drop a repeat)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint,
        on_delete=models.CASCADE,
        related_name="deliveries",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    event = models.CharField(max_length=100)
    event_key = models.CharField(max_length=200)  # one delivery per endpoint and event
    payload = models.JSONField(default=dict)
    status = models.CharField(
        max_length=16,
        choices=WebhookDeliveryStatus.choices,
        default=WebhookDeliveryStatus.PENDING,
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "event_key", "tenant"], name="webhookdelivery_once_per_event"
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="webhookdelivery_due",
                condition=models.Q(status="pending"),
            )
        ]


class GraphInterrupt(TenantOwned):
    """An `interrupt()` of a LangGraph thread (agents/runtime/graph_runs.py): where it was
    raised (the root namespace's checkpoint and task), the approval request it opened if it
    names an action, and whether the graph has been answered or moved past it. One row per
    interrupt id and run, however many times its writes arrive."""

    id = models.BigAutoField(primary_key=True)
    # No foreign-key triggers (as the engine's per-step rows): written at every step of a
    # graph, and deleting runs would check them row by row with no index on run_id. Deleting
    # a run or a tenant deletes them all the same (Django's cascade, external_threads).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    interrupt_id = models.CharField(max_length=200)
    checkpoint_id = models.CharField(max_length=100)
    task_id = models.CharField(max_length=200)
    node = models.CharField(max_length=100, blank=True)
    request_id = models.UUIDField(null=True, blank=True)  # its approval request, if any
    answered_at = models.DateTimeField(null=True, blank=True)  # a decision or a resume value
    closed_at = models.DateTimeField(null=True, blank=True)  # the graph moved past it
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "run", "interrupt_id"], name="graphinterrupt_unique_id"
            )
        ]
