"""The LangGraph door as a door: one request per step, its own rate bucket counted in steps
per tenant, a client that waits out 429s and retries dropped connections, refusals with
stable codes, and state values as large as PostgresSaver takes."""

from __future__ import annotations

import base64
import datetime as dt
import json
import operator
import uuid
from typing import Annotated, TypedDict

import httpx
import pytest
from agentstate_client import AgentStateError, AgentStateSaver, Client
from django.test import Client as DjangoClient
from django.utils import timezone
from langgraph.graph import END, START, StateGraph

from agents.runtime import external_fast, progress
from agents.runtime.models import Checkpoint, ExternalCheckpoint, ExternalWrite, Run
from tenants.models import ApiKey, Tenant
from tenants.scope import tenant_scope
from tests import factories
from tests.windows import clear_of_a_window_edge

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Counter(TypedDict):
    i: int
    seen: Annotated[list[str], operator.add]


def ring_graph(saver: AgentStateSaver, nodes: int, until: int):
    """`nodes` nodes in a ring, each adding one to `i`, until `i` reaches `until`."""

    def step(state: Counter) -> dict:
        return {"i": state["i"] + 1}

    builder = StateGraph(Counter)
    names = [f"n{k}" for k in range(nodes)]
    for name in names:
        builder.add_node(name, step)
    builder.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        builder.add_edge(a, b)
    builder.add_conditional_edges(names[-1], lambda s: END if s["i"] >= until else names[0])
    return builder.compile(checkpointer=saver)


def counting(saver: AgentStateSaver) -> dict[int, int]:
    """Answers of the saver's server, by status."""
    return saver._client.answers


def api(key: str) -> DjangoClient:
    return DjangoClient(HTTP_AUTHORIZATION=f"Bearer {key}")


def put_op(thread: str, checkpoint_id: str, *, blob: bytes = b"{}") -> dict:
    return {
        "op": "put",
        "thread_id": thread,
        "checkpoint_id": checkpoint_id,
        "type": "json",
        "blob": base64.b64encode(blob).decode(),
    }


def post_steps(client: DjangoClient, ops: list[dict]):
    return client.post("/api/v1/langgraph/steps", {"ops": ops}, content_type="application/json")


def test_a_graph_of_ten_nodes_runs_a_thousand_steps_on_a_default_write_key_without_a_429(
    console_url, tenant_a
):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    with AgentStateSaver(console_url, api_key=key) as saver:
        answers = counting(saver)
        config = {"configurable": {"thread_id": "long-loop"}, "recursion_limit": 1100}

        result = ring_graph(saver, nodes=10, until=1000).invoke({"i": 0, "seen": []}, config)

    assert result["i"] == 1000
    assert 429 not in answers and set(answers) == {200}
    # One request per step (and the first read): the writes travel with the next checkpoint.
    assert sum(answers.values()) <= 1.2 * 1000
    with tenant_scope(tenant_a.pk):
        assert ExternalCheckpoint.objects.filter(thread_id="long-loop").count() >= 1000


def test_the_saver_waits_out_the_tenants_step_rate_and_the_graph_never_sees_a_429(
    console_url, tenant_a
):
    with tenant_scope(tenant_a.pk):
        Tenant.objects.filter(pk=tenant_a.pk).update(api_rate_limits={"langgraph": "8/s"})
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    with AgentStateSaver(console_url, api_key=key) as saver:
        answers = counting(saver)

        result = ring_graph(saver, nodes=2, until=24).invoke(
            {"i": 0, "seen": []}, {"configurable": {"thread_id": "slow"}}
        )

    assert result["i"] == 24
    assert answers.get(429, 0) >= 1  # the limit was met, and waited out


def test_a_key_revoked_or_expired_between_two_steps_is_refused_at_the_next_one(tenant_a):
    # The door reuses a key it read a moment ago, but only once the step's own statements
    # proved it still active and unexpired: revoking takes effect at the very next step.
    made = factories.make_api_key(tenant_a, ["read", "write"])
    other = factories.make_api_key(tenant_a, ["read", "write"])
    for first, end in ((made, "revoke"), (other, "expire")):
        thread = f"t-{end}"
        assert post_steps(api(first.raw), [put_op(thread, "1")]).status_code == 200
        assert post_steps(api(first.raw), [put_op(thread, "2")]).status_code == 200
        with tenant_scope(tenant_a.pk):
            change = (
                {"revoked_at": timezone.now()}
                if end == "revoke"
                else {"expires_at": timezone.now() - dt.timedelta(seconds=1)}
            )
            ApiKey.objects.filter(pk=first.key.pk).update(**change)
        refused = post_steps(api(first.raw), [put_op(thread, "3")])
        assert refused.status_code == 401 and refused.json()["code"] == "unauthenticated"
        with tenant_scope(tenant_a.pk):
            saved = ExternalCheckpoint.objects.filter(thread_id=thread)
            assert sorted(saved.values_list("checkpoint_id", flat=True)) == ["1", "2"]


@pytest.mark.parametrize("prepared", [True, False])
def test_a_known_keys_common_step_is_one_statement_and_saves_what_the_general_path_saves(
    tenant_a, settings, monkeypatch, prepared
):
    settings.AGENTSTATE_PREPARED_STATEMENTS = prepared
    taken = []
    fast = external_fast.step
    monkeypatch.setattr(
        external_fast, "step", lambda **kw: taken.append(result := fast(**kw)) or result
    )
    sent: list[dict] = []
    progress.subscribe(sent.append)
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    for i in range(5):
        put = {**put_op("quick", str(i)), "next": ["n"] if i < 4 else [], "step": f"n{i}"}
        write = {
            "op": "writes", "thread_id": "quick", "checkpoint_id": str(i - 1),
            "task_id": f"task-{i}", "writes": [{"idx": 0, "channel": "i", "type": "json",
                                                 "blob": base64.b64encode(b"1").decode()}],
        }  # fmt: skip
        answer = post_steps(api(key), [write, put] if i else [put])
        assert answer.status_code == 200, answer.content
    progress.unsubscribe(sent.append)
    # The first (a key not read before; the run is made) takes the general path; the rest,
    # the last too (the run succeeds, an event of its own), one statement each.
    assert [result is not None for result in taken] == [True, True, True, True]
    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="quick")
        assert (run.status, run.step_seq, run.event_seq) == ("succeeded", 5, 7)
        assert list(Checkpoint.objects.filter(run=run).values_list("seq", flat=True)) == [
            1,
            2,
            3,
            4,
            5,
        ]
        assert ExternalWrite.objects.filter(thread_id="quick").count() == 4
        stored = list(run.events.order_by("seq").values_list("kind", "seq"))
        steps = run.events.filter(kind="step.finished").order_by("seq")
        after_each = [event.data["status"] for event in steps]
    kinds = [kind for kind, _ in stored]
    assert kinds.count("step.finished") == 5 and kinds.count("run.status") == 2
    # Each step says where it left the run, as the engine's steps do: running until the end.
    assert after_each == ["running"] * 4 + ["succeeded"]
    live = [
        e["status"] for e in sent if e["kind"] == "step.finished" and e["run_id"] == str(run.pk)
    ]
    assert live == after_each
    # Every event was sent live too, with the number it was stored under.
    assert [(e["kind"], e["seq"]) for e in sent if e["run_id"] == str(run.pk)] == stored


def test_a_known_keys_new_thread_is_made_in_its_first_statement_as_the_general_path_makes_it(
    tenant_a, monkeypatch
):
    taken = []
    fast = external_fast.step
    monkeypatch.setattr(
        external_fast, "step", lambda **kw: taken.append(result := fast(**kw)) or result
    )
    made = factories.make_api_key(tenant_a, ["read", "write"])
    for thread in ("general", "fast"):  # the key is read on the first: the second is fast
        for i, nodes in enumerate((["n"], [])):
            put = {**put_op(thread, str(i)), "next": nodes, "step": f"n{i}"}
            assert post_steps(api(made.raw), [put]).status_code == 200
    assert [result is not None for result in taken] == [True, True, True]
    fields = [
        "agent",
        "agent_version",
        "status",
        "current_step",
        "step_seq",
        "event_seq",
        "input",
        "created_by_id",
        "attempts",
        "lease_owner",
        "waiting_for",
        "error",
    ]
    with tenant_scope(tenant_a.pk):
        runs = {r.session.title: r for r in Run.objects.select_related("session")}
        general, quick = runs["general"], runs["fast"]
        assert {f: getattr(quick, f) for f in fields} == {
            **{f: getattr(general, f) for f in fields},
            "input": {"thread_id": "fast", "checkpoint_ns": ""},
        }
        assert quick.finished_at is not None and quick.started_at is not None
        for session in (general.session, quick.session):
            assert (session.agent, session.status, session.driver, session.user_id) == (
                "langgraph",
                "active",
                f"key:{made.key.pk}",
                None,
            )
        kinds = [
            list(r.events.order_by("seq").values_list("kind", flat=True)) for r in (general, quick)
        ]
        assert kinds[0] == kinds[1]


def step_ops(thread: str, i: int, *, last: bool = False) -> list[dict]:
    """Step i of a thread: the writes of the task that ran from checkpoint i-1, checkpoint i."""
    put = {**put_op(thread, str(i)), "next": [] if last else ["n"], "step": f"n{i}"}
    if i:
        put["parent_checkpoint_id"] = str(i - 1)
    if not i:
        return [put]
    write = {
        "op": "writes", "thread_id": thread, "checkpoint_id": str(i - 1),
        "task_id": f"task-{i}", "writes": [{"idx": 0, "channel": "i", "type": "json",
                                             "blob": base64.b64encode(b"1").decode()}],
    }  # fmt: skip
    return [write, put]


def test_a_batch_of_several_steps_is_saved_by_the_function_as_one_step_per_request_is(
    tenant_a, monkeypatch
):
    # A graph that ran ahead (durability "async") sends the steps queued behind the one in
    # flight together: one statement each, in one transaction, the same rows and events.
    taken = []
    fast = external_fast.step
    monkeypatch.setattr(
        external_fast, "step", lambda **kw: taken.append(result := fast(**kw)) or result
    )
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    for thread in ("one-by-one", "together"):
        assert post_steps(api(key), step_ops(thread, 0)).status_code == 200
    for i in range(1, 5):
        answer = post_steps(api(key), step_ops("one-by-one", i, last=i == 4))
        assert answer.status_code == 200
    batch = [op for i in range(1, 5) for op in step_ops("together", i, last=i == 4)]
    answer = post_steps(api(key), batch)
    assert answer.status_code == 200, answer.content
    assert [s["checkpoint_id"] for s in answer.json()["saved"]] == ["1", "2", "3", "4"]
    assert len(taken) == 6 and all(result is not None for result in taken[1:])
    with tenant_scope(tenant_a.pk):
        runs = {r.session.title: r for r in Run.objects.select_related("session")}
        fields = ("status", "step_seq", "event_seq", "current_step", "version")
        one, together = runs["one-by-one"], runs["together"]
        assert [getattr(together, f) for f in fields] == [getattr(one, f) for f in fields]
        assert together.status == "succeeded"

        def kinds(run):
            return list(run.events.order_by("seq").values_list("kind", "data__status"))

        assert kinds(together) == kinds(one)
        assert ExternalWrite.objects.filter(thread_id="together").count() == 4
        assert list(
            Checkpoint.objects.filter(run=together).order_by("seq").values_list("seq", "step")
        ) == list(Checkpoint.objects.filter(run=one).order_by("seq").values_list("seq", "step"))


def test_a_batch_of_steps_for_a_thread_another_key_drives_writes_nothing(tenant_a):
    mine = factories.make_api_key(tenant_a, ["read", "write"]).raw
    theirs = factories.make_api_key(tenant_a, ["read", "write"]).raw
    assert post_steps(api(mine), step_ops("mine", 0)).status_code == 200
    post_steps(api(theirs), step_ops("theirs", 0))  # their key is known to the door now
    batch = [op for i in range(1, 4) for op in step_ops("mine", i)]
    refused = post_steps(api(theirs), batch)
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
    with tenant_scope(tenant_a.pk):
        assert ExternalCheckpoint.objects.filter(thread_id="mine").count() == 1
        assert not ExternalWrite.objects.filter(thread_id="mine").exists()


def test_steps_count_in_the_tenants_langgraph_bucket_across_its_keys(tenant_a, settings):
    clear_of_a_window_edge()
    settings.API_RATE_LIMIT_LANGGRAPH = "3/min"
    first = factories.make_api_key(tenant_a, ["read", "write"]).raw
    second = factories.make_api_key(tenant_a, ["read", "write"]).raw

    two = post_steps(api(first), [put_op("t", "1"), put_op("t", "2")])
    one = post_steps(api(second), [put_op("u", "3")])  # its own thread: "t" is the first's
    refused = post_steps(api(second), [put_op("u", "4")])

    assert two.status_code == one.status_code == 200
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "per minute" in refused.json()["message"]


@pytest.mark.parametrize("prepared", [True, False])
def test_a_batch_saves_writes_and_the_checkpoint_after_them_in_one_request(
    tenant_a, settings, prepared
):
    # Prepared and pipelined, or (behind a pooler without prepared statements) as one text.
    settings.AGENTSTATE_PREPARED_STATEMENTS = prepared
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    first = post_steps(api(key), [put_op("batch", "1")])
    write = {
        "op": "writes",
        "thread_id": "batch",
        "checkpoint_id": "1",
        "task_id": "task-a",
        "writes": [{"idx": 0, "channel": "i", "type": "json", "blob": "MQ=="}],
    }
    both = post_steps(api(key), [write, {**put_op("batch", "2"), "parent_checkpoint_id": "1"}])
    again = post_steps(api(key), [write, {**put_op("batch", "2"), "parent_checkpoint_id": "1"}])

    assert first.status_code == both.status_code == again.status_code == 200
    assert [s["checkpoint_id"] for s in both.json()["saved"]] == ["2"]
    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="batch")
        assert ExternalWrite.objects.filter(run=run, checkpoint_id="1").count() == 1
        assert ExternalCheckpoint.objects.filter(run=run).count() == 2
        # Saving the same checkpoint again replaced it: two readable checkpoints, not three.
        assert list(Checkpoint.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2]
        assert run.step_seq == 2


@pytest.mark.parametrize(
    ("key_scopes", "header", "status", "code"),
    [
        (["read", "write"], "Bearer ak_nope", 401, "unauthenticated"),
        (["read", "write"], "Basic abc", 401, "unauthenticated"),
        (["read"], None, 403, "permission_denied"),
    ],
)
def test_the_steps_door_refuses_unknown_keys_and_read_only_keys(
    tenant_a, key_scopes, header, status, code
):
    key = factories.make_api_key(tenant_a, key_scopes).raw
    client = DjangoClient(HTTP_AUTHORIZATION=header or f"Bearer {key}")

    response = post_steps(client, [put_op("t", "1")])

    assert response.status_code == status and response.json()["code"] == code
    with tenant_scope(tenant_a.pk):
        assert not ExternalCheckpoint.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ops": []}, "ops"),
        ({"ops": [{"op": "drop"}]}, "ops[0].op"),
        ({"ops": [{**put_op("t", "1"), "blob": "not base64!"}]}, "ops[0].blob"),
        ({"ops": [{**put_op("t", "1"), "thread_id": "x" * 201}]}, "ops[0].thread_id"),
        ({"ops": [{**put_op("t", "1"), "metadata": []}]}, "ops[0].metadata"),
        (
            {"ops": [{"op": "writes", "thread_id": "t", "checkpoint_id": "1", "task_id": "a",
                      "writes": [{"idx": True, "channel": "c", "type": "json"}]}]},
            "ops[0].writes[0].idx",
        ),
    ],
)  # fmt: skip
def test_a_malformed_batch_is_a_400_naming_the_field(tenant_a, body, field):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw

    response = api(key).post("/api/v1/langgraph/steps", body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid" and field in response.json()["fields"]


def test_nul_characters_and_bad_json_are_refused_with_their_codes(tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    nul = {"ops": [{**put_op("t", "1"), "metadata": {"a": "x\u0000y"}}]}

    refused = api(key).post(
        "/api/v1/langgraph/steps", json.dumps(nul), content_type="application/json"
    )
    broken = api(key).post("/api/v1/langgraph/steps", "{", content_type="application/json")

    assert refused.status_code == 400 and refused.json()["code"] == "invalid_characters"
    assert broken.status_code == 400 and broken.json()["code"] == "malformed_request"


def test_a_state_larger_than_the_limit_is_a_413_naming_the_limit(tenant_a, settings):
    settings.LANGGRAPH_MAX_REQUEST_BYTES = 4096
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw

    response = post_steps(api(key), [put_op("big", "1", blob=b"x" * 8000)])

    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert response.json()["detail"] == {"limit": 4096} and "4096" in response.json()["message"]


def test_a_state_value_of_several_megabytes_is_saved_and_read_back(console_url, tenant_a):
    # Far over the API's usual 1 MiB body: the steps door has a limit of its own.
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    big = "x" * (6 * 1024 * 1024)
    with AgentStateSaver(console_url, api_key=key) as saver:
        builder = StateGraph(Counter)
        builder.add_node("grow", lambda s: {"seen": [big]})
        builder.add_edge(START, "grow")
        config = {"configurable": {"thread_id": "big"}}
        builder.compile(checkpointer=saver).invoke({"i": 0, "seen": []}, config)

        found = saver.get_tuple(config)

    assert found.checkpoint["channel_values"]["seen"] == [big]


def test_the_client_retries_a_429_as_told_and_a_dropped_connection_with_the_same_key():
    calls: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"code": "rate_limited"})
        return httpx.Response(200, json={"ok": True})

    client = Client("http://agentstate.test", "ak_x", transport=httpx.MockTransport(answer))

    assert client.post("runs", {"agent": "a"}) == {"ok": True}
    assert len(calls) == 3
    assert len({c.headers["Idempotency-Key"] for c in calls}) == 1


def test_the_client_gives_up_after_its_retries_with_the_servers_code():
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "0"}, json={"code": "rate_limited"})

    client = Client(
        "http://agentstate.test", "ak_x", transport=httpx.MockTransport(answer), retries=2
    )

    with pytest.raises(AgentStateError) as refused:
        client.get("langgraph/checkpoints")
    assert refused.value.code == "rate_limited" and refused.value.status == 429


def test_the_saver_the_store_and_the_client_close_as_context_managers(console_url, tenant_a):
    from agentstate_client import AgentStateStore

    from tests.sdk.test_saver import in_thread

    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    with AgentStateSaver(console_url, api_key=key) as saver:
        saver.put(
            {"configurable": {"thread_id": "ctx", "checkpoint_ns": ""}},
            {"v": 1, "id": str(uuid.uuid4()), "ts": "", "channel_values": {},
             "channel_versions": {}, "versions_seen": {}},
            {},
            {},
        )  # fmt: skip
    assert saver._client._http.is_closed
    with AgentStateStore(console_url, api_key=key) as store:
        pass
    assert store._client._http.is_closed

    async def use() -> bool:
        async with AgentStateSaver(console_url, api_key=key) as asaver:
            found = await asaver.aget_tuple({"configurable": {"thread_id": "ctx"}})
            assert found is not None
        return asaver._client._http.is_closed

    assert in_thread(use())
