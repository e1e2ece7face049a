from django.db import migrations

from tenants.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("approvals", "0003_policies_and_inbox")]

    operations = [
        enable_rls("approvals_approvalpolicy"),
        enable_rls("approvals_approvergroup"),
        enable_rls("approvals_approvergroupmember"),
    ]
