from django.db import migrations

from tenants.rls import read_settings_once


class Migration(migrations.Migration):
    """Row-level security reads the tenant and context settings once per statement, not
    once per row (tenants/rls.py): the same rows, half the time on a large scan."""

    dependencies = [("approvals", "0004_row_level_security_policies")]

    operations = [read_settings_once("approvals")]
