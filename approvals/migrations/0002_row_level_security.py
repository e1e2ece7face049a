from django.db import migrations

from tenants.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial"), ("tenants", "0002_row_level_security")]

    operations = [enable_rls("approvals_approvalrequest")]
