"""Keep a fact's embedding in its row.

A fact's row (384-dim vector 1.5 kB, text, tsvector) is a little over PostgreSQL's 2 kB TOAST
threshold, so the vector went to the TOAST table, and every search read it back through the
TOAST index: about 2.8 page reads per candidate instead of 0.3. With a toast_tuple_target of
8160 (the largest allowed) rows stay whole until they pass that size. A metadata change: rows
written before it keep their TOASTed vector until they are next written.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_fact_occurred_at")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memoryfact SET (toast_tuple_target = 8160)",
            reverse_sql="ALTER TABLE memory_memoryfact RESET (toast_tuple_target)",
        )
    ]
