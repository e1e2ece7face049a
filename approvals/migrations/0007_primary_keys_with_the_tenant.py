"""Keys that let the tables be distributed by tenant (tenants/distribution.py): the primary key of
every table of this app becomes (id, tenant_id), and its foreign keys to other distributed
tables (the run, the group, the policy) carry the tenant."""

from django.db import migrations

from tenants import distribution

TABLES = [
    "approvals_approvalpolicy",
    "approvals_approvalrequest",
    "approvals_approvergroup",
    "approvals_approvergroupmember",
]
PRIMARY, PRIMARY_BACK = distribution.primary_keys_sql(TABLES)
FOREIGN, FOREIGN_BACK = distribution.foreign_keys_sql(TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0006_keys_with_the_tenant"),
        ("agents", "0028_primary_keys_with_the_tenant"),
    ]

    operations = [
        migrations.RunSQL(PRIMARY, PRIMARY_BACK),
        migrations.RunSQL(FOREIGN, FOREIGN_BACK),
    ]
