"""Where a step's time goes: the engine's persist statement taken apart, one factor at a
time, on copies of the real schema (same server, fsync etc. on).

    .venv/bin/python bench/persist_breakdown.py [--rounds 10] [--runs-per-round 3]

It copies the app database's schema (pg_dump --schema-only, no data) into a template
database and clones one database per variant, then times 20 persists per run with the
engine's former persist statement (CTE_SQL below; agents_persist_step now runs it),
alternating variants in rounds. Variants:

  drive          agents.runtime.engine.runner.drive() on the dev database (the whole engine)
  sql_django     the same claim + 20 persists through Django's cursor, no engine code
  as_is          the persist as Django sends it today: set_config + persist as one text with
                 values inlined (client-side binding), parsed and planned every step; app
                 role, so RLS applies
  pipeline       the same two statements, server-side prepared, in one psycopg pipeline
                 (one Sync: still one round trip and one implicit transaction)
  function       the persist inside a PL/pgSQL function that sets the tenant first; one
                 prepared call (one round trip; PL/pgSQL caches the plan)
  fn_no_rls      function, as the superuser (row-level security bypassed)
  fn_no_fk       function, without the foreign keys of agents_checkpoint/agents_stepattempt
  fn_no_dup_idx  function, without indexes that are a leading prefix of another index
  fn_no_attempt  function, without the agents_stepattempt insert of a successful step
  fn_no_lease    function, without renewing lease_expires_at on every step (it is indexed,
                 so renewing it makes every run UPDATE non-HOT: 8 index inserts)
  fn_lean        function + no_fk + no_dup_idx + no_attempt + no_lease
  raw1           the raw floor of engine_overhead.py (1 round trip) in the same clone

Also per variant: WAL bytes per step and the share of HOT run updates.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

STEPS = 20

# The persist statement as the engine sent it before it became the PL/pgSQL function
# agents_persist_step (agents/runtime/engine/sql/): the variants below take this text apart. The
# engine's own path is measured by `drive` and `sql_django`.
CTE_SQL = """
WITH r AS (
    UPDATE agents_run SET
        status = CASE WHEN cancel_requested AND %(status)s NOT IN ('succeeded', 'failed')
                      THEN 'cancelled' ELSE %(status)s END,
        current_step = %(next_step)s,
        step_seq = %(seq)s,
        version = version + 1,
        attempts = %(attempts)s,
        lease_owner = %(owner)s,
        lease_expires_at = CASE WHEN %(owner)s = '' THEN NULL
                           ELSE clock_timestamp() + make_interval(secs => %(lease)s) END,
        output = %(output)s::jsonb,
        error = %(error)s::jsonb,
        not_before = %(not_before)s,
        waiting_for = %(waiting_for)s,
        wake_payload = NULL,
        state_schema_version = %(schema_version)s,
        event_seq = event_seq + 1,
        finished_at = CASE WHEN %(status)s IN ('succeeded', 'failed') OR cancel_requested
                      THEN clock_timestamp() END,
        updated_at = clock_timestamp()
    WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, status, version, event_seq
), cp AS (
    INSERT INTO agents_checkpoint
        (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
         created_at)
    SELECT %(tenant)s, r.id, %(seq)s, %(step)s, %(next_step)s, %(state)s::jsonb,
           %(schema_version)s, %(messages_upto)s, clock_timestamp()
    FROM r
), att AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT %(tenant)s, r.id, %(seq)s, %(attempt)s, %(step)s, %(worker)s, %(started_at)s,
           clock_timestamp(), 'succeeded', '', '', '', '', %(duration_ms)s
    FROM r
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT %(tenant)s, r.id, r.event_seq, 'step.finished',
           jsonb_build_object('step', %(step)s::text, 'step_seq', %(seq)s::int,
                              'attempt', %(attempt)s::int, 'status', r.status,
                              'next_step', %(next_step)s::text,
                              'duration_ms', round(%(duration_ms)s::numeric, 1)),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
"""

TEMPLATE = "bench_engine_tpl"


def _pg_dump_schema() -> str:
    from config.embedded import _pg_bin

    out = subprocess.run(
        [str(_pg_bin() / "pg_dump"), "--schema-only", "-d", common.super_url("agentstate")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # psql meta-commands (\restrict ...) are not SQL
    return "\n".join(line for line in out.splitlines() if not line.startswith("\\"))


def _drop(conn, name: str) -> None:
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_template() -> None:
    schema = _pg_dump_schema()
    with common.super_connect("postgres") as admin:
        _drop(admin, TEMPLATE)
        admin.execute(f'CREATE DATABASE "{TEMPLATE}" OWNER agentstate')
    with common.super_connect(TEMPLATE) as conn:
        conn.execute(schema)


def clone(name: str, ddl: list[str]) -> str:
    with common.super_connect("postgres") as admin:
        _drop(admin, name)
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}" OWNER agentstate')
    with common.super_connect(name) as conn:
        conn.execute("SET search_path = public")
        for statement in ddl:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO tenants_tenant (id, slug, name, session_cache_ttl_seconds, created_at,"
            " api_rate_limits) VALUES (%s, 'bench', 'bench', 0, now(), '{}')",
            [TENANT],
        )
    return name


TENANT = str(uuid.uuid4())


def foreign_keys_ddl() -> list[str]:
    with common.super_connect(TEMPLATE) as conn:
        rows = conn.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid IN ('agents_checkpoint'::regclass, 'agents_stepattempt'::regclass)"
        ).fetchall()
    return [f'ALTER TABLE {table} DROP CONSTRAINT "{name}"' for table, name in rows]


def duplicate_indexes_ddl() -> list[str]:
    """Non-unique indexes whose key columns are a leading prefix of another index's."""
    with common.super_connect(TEMPLATE) as conn:
        rows = conn.execute(
            "SELECT c.relname, i.relname, ix.indisunique, ix.indpred IS NOT NULL,"
            " string_agg(a.attname, ',' ORDER BY k.ord)"
            " FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid"
            " JOIN pg_class c ON c.oid = ix.indrelid"
            " CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum"
            " WHERE c.relname IN ('agents_run', 'agents_checkpoint', 'agents_stepattempt')"
            " GROUP BY 1, 2, 3, 4"
        ).fetchall()
    drops = []
    for table, index, unique, partial, cols in rows:
        if unique or partial:
            continue
        for other_table, other, _u, other_partial, other_cols in rows:
            if (
                other_table == table
                and other != index
                and not other_partial
                and other_cols.startswith(cols + ",")
            ):
                drops.append(f'DROP INDEX "{index}"')
                break
    return drops


def sql_without_attempt(sql: str) -> str | None:
    # the att CTE ends at the first "\n)" followed by the next CTE (",") or the final SELECT
    out, n = re.subn(r"\n\), att AS \(.*?\n\)(?=[\n,])", "\n)", sql, flags=re.S)
    return out if n == 1 else None


def sql_without_lease_renewal(sql: str) -> str | None:
    out, n = re.subn(
        r"lease_expires_at = CASE WHEN %\(owner\)s = '' THEN NULL\s+"
        r"ELSE clock_timestamp\(\) \+ make_interval\(secs => %\(lease\)s\) END",
        "lease_expires_at = CASE WHEN %(owner)s = '' THEN NULL ELSE lease_expires_at END",
        sql,
    )
    return out if n == 1 else None


PARAM_TYPES = {
    "tenant": "uuid",
    "run": "uuid",
    "version": "int",
    "worker": "text",
    "status": "text",
    "next_step": "text",
    "seq": "int",
    "attempts": "int",
    "owner": "text",
    "lease": "float8",
    "output": "text",
    "error": "text",
    "not_before": "timestamptz",
    "waiting_for": "text",
    "schema_version": "int",
    "step": "text",
    "state": "text",
    "messages_upto": "int",
    "attempt": "int",
    "started_at": "timestamptz",
    "duration_ms": "float8",
    "appended": "jsonb",
}


def persist_function_ddl(sql: str) -> tuple[list[str], str] | None:
    """The persist statement wrapped in a PL/pgSQL function that sets the tenant first:
    one prepared call, one round trip, plans cached by PL/pgSQL."""
    names = sorted(set(re.findall(r"%\((\w+)\)s", sql)) | {"tenant"})
    if any(n not in PARAM_TYPES for n in names):
        return None
    args = ", ".join(f"p_{n} {PARAM_TYPES[n]}" for n in names)
    body = re.sub(r"%\((\w+)\)s", lambda m: "p_" + m.group(1), sql).strip()
    return names, (
        f"CREATE FUNCTION bench_persist({args})"
        " RETURNS TABLE(o_status varchar, o_version int, o_event_seq int)"
        " LANGUAGE plpgsql AS $fn$ BEGIN"
        " PERFORM set_config('app.tenant_id', p_tenant::text, true);"
        f" RETURN QUERY {body}; END $fn$"
    )


def step_params(run_id: str, version: int, k: int) -> dict:
    from django.utils import timezone

    from agents.runtime.engine import store

    last = k == STEPS - 1
    return {
        "tenant": TENANT,
        "run": run_id,
        "version": version,
        "worker": "bench",
        "status": "succeeded" if last else "running",
        "next_step": "" if last else f"s{k + 1}",
        "seq": k + 1,
        "attempts": 0 if last else 1,
        "owner": "" if last else "bench",
        "lease": 120.0,
        "output": store.dumps({"i": STEPS}) if last else None,
        "error": None,
        "not_before": None,
        "waiting_for": "",
        "schema_version": 1,
        "step": f"s{k}",
        "state": store.dumps({"i": k + 1}),
        "messages_upto": 0,
        "attempt": 1,
        "started_at": timezone.now(),
        "duration_ms": 0.01,
        "appended": None,
    }


class SqlVariant:
    """20 persists per run with a given SQL text and schema, sent one of three ways:

    client    as Django sends it: set_config + persist as one text with the values inlined
              (client-side binding, simple query protocol), parsed and planned every step
    pipeline  set_config and persist as server-side prepared statements in one pipeline
    function  one prepared call of a PL/pgSQL function that sets the tenant and persists
    """

    def __init__(self, db: str, sql: str, *, role: str = "app", method: str = "client") -> None:
        import psycopg

        from config import embedded

        info = embedded._pg_info()
        url = info.url.rsplit("/", 1)[0] + f"/{db}" if role == "app" else common.super_url(db)
        self.db = db
        self.method = method
        # Server-side binding: parameters used both as a varchar column value and in a text
        # comparison need one declared type.
        self.sql = (
            re.sub(r"%\((owner|status)\)s(?!::)", r"%(\1)s::text", sql)
            if method == "pipeline"
            else sql
        )
        cursor_factory = psycopg.ClientCursor if method == "client" else psycopg.Cursor
        self.conn = psycopg.connect(url, autocommit=True, cursor_factory=cursor_factory)
        self.admin = common.super_connect(db)
        if method == "function":
            made = persist_function_ddl(sql)
            if made is None:
                raise RuntimeError("CTE_SQL has parameters this bench does not know")
            self.names, ddl = made
            self.admin.execute(ddl)
            self.admin.execute("ALTER FUNCTION bench_persist OWNER TO agentstate")
            self.call = (
                "SELECT o_status, o_version FROM bench_persist("
                + ", ".join(f"p_{n} => %({n})s" for n in self.names)
                + ")"
            )

    def _new_run(self) -> str:
        run_id = str(uuid.uuid4())
        self.admin.execute(
            "INSERT INTO agents_run (id, tenant_id, agent, agent_version, status, current_step,"
            " step_seq, input, attempts, lease_owner, lease_expires_at, version,"
            " state_schema_version, waiting_for, cancel_requested, created_at, started_at,"
            " updated_at) VALUES (%s, %s, 'bench_noop20', 1, 'running', 's0', 0, '{}', 1,"
            " 'bench', now() + interval '120 s', 1, 1, '', false, now(), now(), now())",
            [run_id, TENANT],
        )
        return run_id

    def run_once(self) -> None:
        from agents.runtime.engine import store

        run_id = self._new_run()
        version = 1
        cur = self.conn.cursor()
        for k in range(STEPS):
            params = step_params(run_id, version, k)
            if self.method == "pipeline":
                with self.conn.pipeline():
                    cur.execute(
                        "SELECT set_config('app.tenant_id', %(tenant)s, true)",
                        {"tenant": TENANT},
                        prepare=True,
                    )
                    cur.execute(self.sql, params, prepare=True)
                row = cur.fetchone()
            elif self.method == "function":
                cur.execute(self.call, {n: params[n] for n in self.names}, prepare=True)
                row = cur.fetchone()
            else:
                cur.execute(store._SET_TENANT + self.sql, params)
                cur.nextset()
                row = cur.fetchone()
            if row is None:
                raise RuntimeError(f"{self.db}: fenced at step {k}")
            version = row[1]

    def extra(self) -> dict:
        self.conn.execute("SELECT pg_stat_force_next_flush()")
        row = self.admin.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agents_run'"
        ).fetchone()
        return {"hot_share": round(row[1] / row[0], 2) if row and row[0] else None}

    def close(self) -> None:
        self.conn.close()
        self.admin.close()


class RawVariant:
    def __init__(self, db: str) -> None:
        from bench._peers import RawFloor

        self.raw = RawFloor(STEPS, one_round_trip=True, database=db)
        self.db = db

    def run_once(self) -> None:
        self.raw.run_once()

    def extra(self) -> dict:
        return {}

    def close(self) -> None:
        self.raw.close()


class DriveVariant:
    """On the dev database, through Django, as engine_overhead.py's `ours`."""

    def __init__(self, tenant, *, engine: bool) -> None:
        from bench._noop_agent import agent_name

        self.tenant = tenant
        self.engine = engine
        self.agent = agent_name(STEPS)
        self.pending: list[str] = []

    def prepare(self, count: int) -> None:
        self.pending += common.create_runs(self.tenant, self.agent, count)

    def run_once(self) -> None:

        from agents.runtime.engine import store
        from agents.runtime.engine.runner import drive

        run_id = self.pending.pop()
        tenant_id = str(self.tenant.pk)
        if self.engine:
            drive(tenant_id=tenant_id, run_id=run_id, worker="bench", slice_seconds=3600)
            return
        claim = store.claim(tenant_id=tenant_id, run_id=run_id, worker="bench", lease_seconds=120)
        version = claim.version
        for k in range(STEPS):
            params = {**step_params(run_id, version, k), "tenant": tenant_id}
            version = store.persist(params)[1]

    def extra(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs-per-round", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    args = parser.parse_args()
    common.setup_django()
    server = common.assert_durable()
    make_template()
    fks, dups = foreign_keys_ddl(), duplicate_indexes_ddl()
    sql = CTE_SQL
    no_att = sql_without_attempt(sql)
    no_lease = sql_without_lease_renewal(sql)
    lean_sql = no_lease and sql_without_attempt(no_lease)
    tenant = common.bench_tenant("breakdown")
    variants: dict[str, object] = {
        "drive": DriveVariant(tenant, engine=True),
        "sql_django": DriveVariant(tenant, engine=False),
        "as_is": SqlVariant(clone("bench_eng_as_is", []), sql),
        "pipeline": SqlVariant(clone("bench_eng_pipeline", []), sql, method="pipeline"),
    }
    # Each factor is measured with the fastest method (the function); if the engine's SQL
    # grew parameters this bench does not know, it falls back to the as-is method.
    method = "function" if persist_function_ddl(sql) else "client"
    if method == "client":
        print("note: CTE_SQL has unknown parameters; factors measured as sent today")
    factors = [
        ("function", sql, [], "app"),
        ("fn_no_rls", sql, [], "super"),
        ("fn_no_fk", sql, fks, "app"),
        ("fn_no_dup_idx", sql, dups, "app"),
        ("fn_no_attempt", no_att, [], "app"),
        ("fn_no_lease", no_lease, [], "app"),
        ("fn_lean", lean_sql, fks + dups, "app"),
    ]
    for key, text, ddl, role in factors:
        if text is None:
            print(f"note: {key} skipped: CTE_SQL no longer has the shape it removes")
            continue
        name = key if method == "function" else f"{key}(client)"
        variants[name] = SqlVariant(clone(f"bench_eng_{key}", ddl), text, role=role, method=method)
    variants["raw1"] = RawVariant(clone("bench_eng_raw1", []))

    per_variant = args.rounds * args.runs_per_round
    for v in variants.values():
        if hasattr(v, "prepare"):
            v.prepare(per_variant + 2)
    for v in variants.values():
        for _ in range(2):
            v.run_once()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    wal: dict[str, list[int]] = {k: [] for k in variants}
    monitor = common.Monitor()
    order = list(variants)
    for round_no in range(args.rounds):
        shift = round_no % len(order)
        for key in order[shift:] + order[:shift]:
            for _ in range(args.runs_per_round):
                before = monitor.snapshot()
                t0 = time.perf_counter()
                variants[key].run_once()
                samples[key].append((time.perf_counter() - t0) * 1000 / STEPS)
                wal[key].append(common.Monitor.delta(before, monitor.snapshot())["wal_bytes"])
    monitor.close()

    base = common.median(samples["as_is"])
    print(f"\npersist of a {STEPS}-step no-op run, per step (ms), alternating rounds")
    head = f"{'variant':<12}{'median':>9}{'p95':>8}{'vs as_is':>10}{'WAL B/step':>12}{'HOT':>6}"
    print(head)
    print("-" * len(head))
    results = {}
    for key, v in variants.items():
        med = common.median(samples[key])
        extra = v.extra()
        results[key] = {
            "median_ms": round(med, 4),
            "p95_ms": round(common.p95(samples[key]), 4),
            "vs_as_is": round(med / base, 3),
            "wal_bytes_per_step": round(common.median(wal[key]) / STEPS, 1),
            **extra,
        }
        hot = extra.get("hot_share")
        print(
            f"{key:<12}{med:>9.3f}{common.p95(samples[key]):>8.3f}{med / base:>10.2f}"
            f"{results[key]['wal_bytes_per_step']:>12.0f}"
            f"{'-' if hot is None else f'{hot:.2f}':>6}"
        )
    print(
        f"\ndropped FKs: {len(fks)}; dropped prefix-duplicate indexes: "
        f"{[d.split()[-1] for d in dups]}"
    )
    for v in variants.values():
        v.close()
    cleanup = common.cleanup_tenant(tenant)
    if not args.keep:
        with common.super_connect("postgres") as admin:
            for v in variants.values():
                if hasattr(v, "db"):
                    _drop(admin, v.db)
            _drop(admin, TEMPLATE)
    print(f"{cleanup}; server {server}")
    common.dump_json(
        {
            "bench": "persist_breakdown",
            "steps_per_run": STEPS,
            "runs_per_variant": per_variant,
            "variants": results,
            "dropped_indexes": [d.split()[-1].strip('"') for d in dups],
            "dropped_foreign_keys": len(fks),
            "server": server,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
