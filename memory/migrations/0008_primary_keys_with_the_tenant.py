"""Keys that let the tables be distributed by tenant (tenants/distribution.py): the primary key
of the facts, policies, settings and privacy link uses becomes (id, tenant_id), and a fact's
`superseded_by` carries the tenant. (Privacy link uses are a reference table: their nonce
stays globally unique.)"""

from django.db import migrations

from tenants import distribution

TABLES = [
    "memory_memoryfact",
    "memory_memorypolicy",
    "memory_memorysettings",
    "memory_privacylinkuse",
]
PRIMARY, PRIMARY_BACK = distribution.primary_keys_sql(TABLES)
FOREIGN, FOREIGN_BACK = distribution.foreign_keys_sql(TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0007_keys_with_the_tenant"),
    ]

    operations = [
        migrations.RunSQL(PRIMARY, PRIMARY_BACK),
        migrations.RunSQL(FOREIGN, FOREIGN_BACK),
    ]
