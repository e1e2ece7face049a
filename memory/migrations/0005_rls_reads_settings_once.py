from django.db import migrations

from tenants.rls import read_settings_once


class Migration(migrations.Migration):
    """Row-level security reads the tenant and context settings once per statement, not
    once per row (tenants/rls.py): the same rows, half the time on a large scan."""

    dependencies = [("memory", "0004_inline_embeddings")]

    operations = [read_settings_once("memory")]
