"""REST endpoints of the agents app: the registry, sessions, runs and their decisions.

Every object lookup goes through a selector that 404s for anyone who may not see it; every
POST honours `Idempotency-Key` (tenants.idempotency); every write is a service call.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.conversations import selectors as conversation_selectors
from agents.presenters.forms import customer_for
from agents.runtime import errors, selectors, services
from agents.runtime.definitions import all_agents
from agents.runtime.serializers import RunSerializer
from agents.web import serializers as s
from approvals import selectors as approval_selectors
from approvals.serializers import DecisionResultSerializer, DecisionSerializer
from approvals.services import approval_decide
from core.api import ApiView, error_responses, validated
from core.paging import NEWEST_FIRST, cursor_encode, paginate
from core.serializers import PageQuerySerializer
from tenants.errors import PermissionDenied
from tenants.idempotency import idempotent
from tenants.models import Role, Scope
from tenants.principal import Principal
from tenants.replica import replica_reads
from tenants.selectors import members_for_tenant

TAGS = ["agents"]


def _page(rows: QuerySet, query: dict[str, Any]) -> dict[str, Any]:
    """Newest first, keyset-paginated on (created_at, id)."""
    page = paginate(rows, order=NEWEST_FIRST, after=query.get("before"), limit=query["limit"])
    last = page.last
    next_cursor = None if last is None else cursor_encode(last.created_at, last.pk)
    return {"results": page.rows, "next": next_cursor}


# --- registry -------------------------------------------------------------------------------------


class AgentListView(ApiView):
    @extend_schema(operation_id="agents_list", tags=TAGS, responses=s.AgentSerializer(many=True))
    def get(self, request: Request) -> Response:
        """The registered agents: name, version, steps and state version."""
        return Response(s.AgentSerializer(all_agents(), many=True).data)


# --- sessions -------------------------------------------------------------------------------------


def _session_owner(principal: Principal, username: str | None) -> Any:
    """The user a new session is for: members only for themselves; others for any member."""
    own = principal.user
    if username is None or (own is not None and own.get_username() == username):
        return own
    if principal.api_key is None and principal.role not in (Role.ADMIN, Role.MANAGER):
        raise PermissionDenied("Members open conversations only for themselves.")
    membership = members_for_tenant(tenant=principal.tenant).filter(user__username=username)
    found = membership.first()
    if found is None:
        raise serializers.ValidationError({"user": ["No member of this tenant has that name."]})
    return found.user


class SessionListView(ApiView):
    rate_bucket = {"POST": "write"}  # new conversations

    @extend_schema(
        operation_id="sessions_list",
        tags=TAGS,
        parameters=[PageQuerySerializer],
        responses={200: s.SessionPageSerializer, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        """Conversations, newest first (members see only their own)."""
        query = validated(PageQuerySerializer, request.query_params)
        sessions = selectors.sessions_for(request.principal).select_related("user")
        return Response(s.SessionPageSerializer(_page(sessions, query)).data)

    @extend_schema(
        operation_id="sessions_create",
        tags=TAGS,
        request=s.SessionCreateSerializer,
        responses={201: s.SessionSerializer, **error_responses(400, 403, 413, 422)},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        """Open a conversation with an agent, for yourself or (staff, API keys) a member."""
        data = validated(s.SessionCreateSerializer, request.data)
        principal = request.principal
        session = services.session_create(
            principal=principal,
            agent=data["agent"],
            user=_session_owner(principal, data.get("user")),
            title=data["title"],
        )
        return Response(s.SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailView(ApiView):
    @extend_schema(
        operation_id="sessions_retrieve",
        tags=TAGS,
        responses={200: s.SessionDetailSerializer, **error_responses(404)},
    )
    def get(self, request: Request, session_id: Any) -> Response:
        """One conversation with its transcript."""
        session = selectors.session_for(request.principal, session_id)
        context = {"messages": selectors.transcript(session)}
        return Response(s.SessionDetailSerializer(session, context=context).data)


class SessionMessagesView(ApiView):
    rate_bucket = "write"

    @extend_schema(
        operation_id="sessions_messages_create",
        tags=TAGS,
        request=s.MessageCreateSerializer,
        responses={201: s.MessagePostedSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @idempotent
    def post(self, request: Request, session_id: Any) -> Response:
        """Post a user message: it joins the active run or starts a new one, whose input is
        the conversation's last run's input (its `customer`, say) with this `message`; a
        member's new run is always for themselves, whoever the last run was for."""
        session = selectors.session_for(request.principal, session_id)
        data = validated(s.MessageCreateSerializer, request.data)
        message, run = services.message_post(
            principal=request.principal,
            session=session,
            content=data["content"],
            input_overrides=_run_input(request.principal, {}),
        )
        body = s.MessagePostedSerializer({"message": message, "run": run}).data
        return Response(body, status=status.HTTP_201_CREATED)


class SessionForksView(ApiView):
    rate_bucket = {"POST": "write"}

    @extend_schema(
        operation_id="sessions_forks_list",
        tags=TAGS,
        responses={200: s.SessionSerializer(many=True), **error_responses(404)},
    )
    def get(self, request: Request, session_id: Any) -> Response:
        """Conversations forked from this one, oldest first."""
        session = selectors.session_for(request.principal, session_id)
        forks = selectors.session_forks(request.principal, session).select_related("user")
        return Response(s.SessionSerializer(forks, many=True).data)

    @extend_schema(
        operation_id="sessions_forks_create",
        tags=TAGS,
        request=s.ForkCreateSerializer,
        responses={201: s.SessionSerializer, **error_responses(400, 403, 404, 413, 422)},
    )
    @idempotent
    def post(self, request: Request, session_id: Any) -> Response:
        """Fork the conversation after one of its messages: the fork sees the thread up to
        there (nothing is copied), then its own messages. 400 `fork_point_invalid` when the
        message is not in this conversation."""
        session = selectors.session_for(request.principal, session_id)
        data = validated(s.ForkCreateSerializer, request.data)
        fork = services.session_fork(
            principal=request.principal, session=session, at_seq=data["at_seq"], title=data["title"]
        )
        return Response(s.SessionSerializer(fork).data, status=status.HTTP_201_CREATED)


class SessionThreadView(ApiView):
    @extend_schema(
        operation_id="sessions_thread_retrieve",
        tags=TAGS,
        responses={200: s.ThreadSerializer, **error_responses(404)},
    )
    def get(self, request: Request, session_id: Any) -> Response:
        """The whole thread: inherited messages up to each fork point, then this
        conversation's own, with the rolling summary and what it covers."""
        session = selectors.session_for(request.principal, session_id)
        body = {
            "session": session,
            "ancestors": conversation_selectors.thread_ancestors(session)[:-1],
            "summary": session.summary,
            "summary_upto": session.summary_upto,
            "messages": conversation_selectors.thread(session),
        }
        return Response(s.ThreadSerializer(body).data)


# --- runs -----------------------------------------------------------------------------------------


class RunListView(ApiView):
    rate_bucket = {"POST": "write"}  # run starts cost model money

    @extend_schema(
        operation_id="runs_list",
        tags=TAGS,
        parameters=[s.RunListQuerySerializer],
        responses={200: s.RunPageSerializer, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        """Runs, newest first, filtered by status and agent, keyset-paginated."""
        query = validated(s.RunListQuerySerializer, request.query_params)
        with replica_reads(request):  # may lag a few seconds, never after the caller's write
            # a run names its session by id: no join to it, only to the user who started it
            runs = (
                selectors.runs_for(
                    request.principal, status=query.get("status"), agent=query.get("agent")
                )
                .select_related(None)
                .select_related("created_by")
            )
            return Response(s.RunPageSerializer(_page(runs, query)).data)

    @extend_schema(
        operation_id="runs_create",
        tags=TAGS,
        request=s.RunCreateSerializer,
        responses={201: RunSerializer, **error_responses(400, 403, 413, 422)},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        """Start a run of an agent with a JSON object as input. A member's run is for
        themselves: its `input.customer` is the signed-in member, whatever the body says (as
        on the runs page and in the chat); staff and API keys name any customer."""
        data = validated(s.RunCreateSerializer, request.data)
        principal = request.principal
        session = None
        if data["session"] is not None:
            session = selectors.sessions_for(principal).filter(pk=data["session"]).first()
            if session is None:
                raise serializers.ValidationError({"session": ["No such conversation."]})
            if session.agent != data["agent"]:
                raise serializers.ValidationError(
                    {"session": [f"This conversation is with agent {session.agent!r}."]}
                )
        run = services.run_start(
            principal=principal,
            agent=data["agent"],
            input=_run_input(principal, data["input"]),
            session=session,
        )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


def _run_input(principal: Principal, given: dict[str, Any]) -> dict[str, Any]:
    """The input of a new run: a member (signed in, not an API key) asks for themselves, like
    the runs page's read-only Customer field (agents/presenters/forms.py) and the chat."""
    if principal.api_key is None and principal.sees_only_own:
        return {**given, "customer": customer_for(principal)}
    return given


class RunDetailView(ApiView):
    @extend_schema(
        operation_id="runs_retrieve",
        tags=TAGS,
        responses={200: s.RunDetailSerializer, **error_responses(404)},
    )
    def get(self, request: Request, run_id: Any) -> Response:
        """One run with its checkpoints, attempts, tool-call ledger and approvals."""
        run = selectors.run_for(request.principal, run_id)
        context = {
            **selectors.run_timeline(run),
            "approvals": approval_selectors.run_approvals(run),
        }
        return Response(s.RunDetailSerializer(run, context=context).data)


class RunContextView(ApiView):
    @extend_schema(
        operation_id="runs_context_list",
        tags=TAGS,
        responses={200: s.PackedContextSerializer(many=True), **error_responses(404)},
    )
    def get(self, request: Request, run_id: Any) -> Response:
        """What each step packed for the model: included and dropped items, why, and tokens
        per section."""
        run = selectors.run_for(request.principal, run_id)
        return Response(s.PackedContextSerializer(selectors.packed_contexts(run), many=True).data)


class RunCancelView(ApiView):
    @extend_schema(
        operation_id="runs_cancel",
        tags=TAGS,
        request=None,
        responses={200: RunSerializer, **error_responses(403, 404, 409, 422)},
    )
    @idempotent
    def post(self, request: Request, run_id: Any) -> Response:
        """Cancel a run: at once if it is not running, else at its next step boundary."""
        run = selectors.run_for(request.principal, run_id)
        run = services.run_cancel(principal=request.principal, run=run)
        return Response(RunSerializer(run).data)


class RunEventView(ApiView):
    rate_bucket = "write"

    @extend_schema(
        operation_id="runs_events_create",
        tags=TAGS,
        request=s.EventSerializer,
        responses={200: RunSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @idempotent
    def post(self, request: Request, run_id: Any) -> Response:
        """Deliver an external event to a run waiting for it."""
        run = selectors.run_for(request.principal, run_id)
        data = validated(s.EventSerializer, request.data)
        run = services.run_send_event(
            principal=request.principal, run=run, name=data["name"], payload=data["payload"]
        )
        return Response(RunSerializer(run).data)


class RunDecisionView(ApiView):
    write_scope = Scope.APPROVE

    @extend_schema(
        operation_id="runs_decision_create",
        tags=TAGS,
        request=DecisionSerializer,
        responses={200: DecisionResultSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @idempotent
    def post(self, request: Request, run_id: Any) -> Response:
        """Approve or reject the action a run waits for, optionally with edited arguments."""
        principal = request.principal
        run = selectors.run_for(principal, run_id)
        data = validated(DecisionSerializer, request.data)
        approval = approval_selectors.approval_awaited_by(run)
        if approval is None:
            raise errors.RunNotWaiting(
                f"The run is not waiting for approval (its status is {run.status}).",
                detail={"status": run.status},
            )
        approval = approval_decide(
            principal=principal,
            request=approval,
            approve=data["approve"],
            comment=data["comment"],
            edited_arguments=data["arguments"],
        )
        run.refresh_from_db()
        return Response(DecisionResultSerializer({"approval": approval, "run": run}).data)
