"""The primary keys of this app's reference tables (tenants/distribution.py: copied to every
node on Citus) become (id, tenant_id) like every distributed table's. Their global unique keys
(an API key's hash, an invitation's token) stay global: a reference table may keep them."""

from django.db import migrations

from tenants import distribution

TABLES = ["tenants_apikey", "tenants_invitation", "tenants_membership"]
PRIMARY, PRIMARY_BACK = distribution.primary_keys_sql(TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0007_idempotencyrecord"),
    ]

    operations = [
        migrations.RunSQL(PRIMARY, PRIMARY_BACK),
    ]
