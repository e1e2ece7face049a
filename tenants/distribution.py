"""Where each tenant-owned table goes on a distributed PostgreSQL (Citus), and the keys that let
it go there: docs/scaling.md, checked by tests/tenants/test_distribution.py.

Every table with a `tenant_id` column is **distributed by tenant_id** (its rows live on the
shard of their tenant, all tables colocated), except:

- **reference tables**, copied to every node: small, and looked up before the tenant is known
  (an API key by its hash, an invitation or a privacy link by its token, a person's
  memberships at sign-in), so their unique keys stay global;
- **local tables**, kept on the coordinator: the audit log holds events of no tenant
  (sign-in attempts of unknown people), and a distribution column cannot be NULL.

Every table with a tenant but the local ones has the primary key `(id, tenant_id)` (the
per-run tables, partitioned by the month of their run, `(id, tenant_id, run_id)`: a
partitioned table's key holds its partition column; Citus distributes partitioned tables). A
distributed table's unique keys each carry
`tenant_id`, and each foreign key to another distributed table is `(column, tenant_id)` ->
`(id, tenant_id)` (Django declares those fields `db_constraint=False`; the apps' migrations
add the composite key with `foreign_keys_sql`). `id` comes first so every lookup by id alone
keeps its index. The Django models keep `id` as their primary key: Django 5.2's composite
primary keys cannot yet be the target of a ForeignKey, and every query of ours filters by
the tenant anyway (the scoped querysets), which is what routes it to one shard.
"""

from __future__ import annotations

REFERENCE_TABLES: dict[str, str] = {
    "tenants_tenant": "the tenants themselves: every distributed table's tenant_id points here",
    "tenants_apikey": "found by the hash of the key before the tenant is known",
    "tenants_invitation": "found by the hash of its token before the tenant is known",
    "tenants_membership": "a person's tenants, read at sign-in and on every page's switcher",
    "memory_privacylinkuse": "a privacy link's nonce is spent once, whatever the tenant",
}
LOCAL_TABLES: dict[str, str] = {
    "tenants_auditevent": "holds events of no tenant (tenant_id NULL): stays on the coordinator",
}

# (table, column, referenced table): the foreign keys between distributed tables, each
# `(column, tenant_id) -> (id, tenant_id)`, created by the migration of the table's app.
DISTRIBUTED_FOREIGN_KEYS: list[tuple[str, str, str]] = [
    ("agents_agentsession", "parent_id", "agents_agentsession"),
    ("agents_message", "run_id", "agents_run"),
    ("agents_message", "session_id", "agents_agentsession"),
    ("agents_packedcontext", "run_id", "agents_run"),
    ("agents_run", "session_id", "agents_agentsession"),
    ("agents_toolcall", "run_id", "agents_run"),
    ("agents_webhookdelivery", "endpoint_id", "agents_webhookendpoint"),
    ("approvals_approvalpolicy", "approver_group_id", "approvals_approvergroup"),
    ("approvals_approvalrequest", "run_id", "agents_run"),
    ("approvals_approvalrequest", "approver_group_id", "approvals_approvergroup"),
    ("approvals_approvalrequest", "policy_id", "approvals_approvalpolicy"),
    ("approvals_approvergroupmember", "group_id", "approvals_approvergroup"),
    ("memory_memoryfact", "superseded_by_id", "memory_memoryfact"),
]


def _fk_name(table: str, column: str) -> str:
    return f"{table}_{column}_tenant_fk"[:63]


def primary_keys_sql(tables: list[str]) -> tuple[str, str]:
    """(forward, reverse): each table's primary key becomes (id, tenant_id), and back."""
    forward = [
        f"ALTER TABLE {t} DROP CONSTRAINT {t}_pkey, ADD CONSTRAINT {t}_pkey"
        " PRIMARY KEY (id, tenant_id);"
        for t in tables
    ]
    reverse = [
        f"ALTER TABLE {t} DROP CONSTRAINT {t}_pkey, ADD CONSTRAINT {t}_pkey PRIMARY KEY (id);"
        for t in tables
    ]
    return "\n".join(forward), "\n".join(reverse)


def foreign_keys_sql(tables: list[str]) -> tuple[str, str]:
    """(forward, reverse): the composite foreign keys of these tables (added NOT VALID, then
    validated: existing rows are checked without holding the parent's lock meanwhile)."""
    forward, reverse = [], []
    for table, column, parent in DISTRIBUTED_FOREIGN_KEYS:
        if table not in tables:
            continue
        name = _fk_name(table, column)
        forward.append(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({column}, tenant_id)"
            f" REFERENCES {parent} (id, tenant_id) DEFERRABLE INITIALLY DEFERRED NOT VALID;"
            f"\nALTER TABLE {table} VALIDATE CONSTRAINT {name};"
        )
        reverse.append(f"ALTER TABLE {table} DROP CONSTRAINT {name};")
    return "\n".join(forward), "\n".join(reverse)


def citus_ddl(tenant_tables: list[str]) -> list[str]:
    """The statements that would place these tables on Citus (docs/scaling.md): reference
    tables first, then every other one distributed by tenant_id, colocated with the runs."""
    statements = [f"SELECT create_reference_table('{t}');" for t in sorted(REFERENCE_TABLES)]
    for table in sorted(tenant_tables):
        if table in REFERENCE_TABLES or table in LOCAL_TABLES:
            continue
        colocate = "" if table == "agents_run" else ", colocate_with => 'agents_run'"
        statements.append(f"SELECT create_distributed_table('{table}', 'tenant_id'{colocate});")
    return statements
