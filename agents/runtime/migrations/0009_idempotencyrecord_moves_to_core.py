# IdempotencyRecord belongs to core now (core 0001 adds it to core's state). The table,
# its indexes and its row-level-security policy stay as they are: state only, no SQL.
# Nothing has a foreign key to it, so no other model's state needs retargeting.

from django.db import migrations


def _relabel_content_type(app_label: str, to: str):
    # The content type (and the admin permissions that point at it) moves with the model,
    # instead of a new one being made and the old one left stale.
    def relabel(apps, schema_editor) -> None:
        content_types = apps.get_model("contenttypes", "ContentType").objects.using(
            schema_editor.connection.alias
        )
        if not content_types.filter(app_label=to, model="idempotencyrecord").exists():
            content_types.filter(app_label=app_label, model="idempotencyrecord").update(
                app_label=to
            )

    return relabel


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0008_checkpoint_columns_default_in_the_database"),
        ("contenttypes", "0002_remove_content_type_name"),
        # Core holds the model before the agents app lets go of it.
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyRecord")],
            database_operations=[],
        ),
        migrations.RunPython(
            _relabel_content_type("agents", "core"), _relabel_content_type("core", "agents")
        ),
    ]
