from django.db import migrations

from tenants.rls import read_settings_once


class Migration(migrations.Migration):
    """Row-level security reads the tenant and context settings once per statement, not
    once per row (tenants/rls.py): the same rows, half the time on a large scan."""

    dependencies = [("agents", "0012_packed_context_names_who_answered")]

    operations = [read_settings_once("agents")]
