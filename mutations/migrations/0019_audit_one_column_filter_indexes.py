"""Fewer index bytes per audit row, as the indexes grow row by row (issue 16): the namespace, preset and user
indexes become one-column indexes, and the time index ascending.

(namespace, created_at DESC, id DESC) and its preset and user twins held a key per row: 61, 55 and 108 bytes a
row at 20,000,000 rows, built row by row (their pages split in the middle as each value's newest rows arrive
at its start). These columns take a few dozen values, so a one-column btree deduplicates: one key per value
and a posting list of 6-byte row addresses, about 6 bytes a row each. What a filtered history page reads
instead: a common value's page is among the newest rows (audit_created_desc, as for the decision filter since
0015), a rare value's rows come through its index and are sorted; the planner picks by the column's
statistics.

audit_created_desc (created_at DESC, id DESC) becomes audit_created (created_at, id), read backward for newest
first. Descending, each new row's entry went at the index's left end, and each split there left two half-full
pages: 57 bytes a row. Ascending, entries go at the right end, where PostgreSQL splits a full page leaving it
90 % full: about 32.

Measured on 300,000 rows of `fill_audit --days 2` (time order, indexes in place), bytes a row of index:
user 143.9 -> 9.1, namespace 80.9 -> 7.3, preset 73.3 -> 7.4, time 56.7 -> see docs/audit-rollup.md.

Building the three indexes takes the table's SHARE lock, as any CREATE INDEX: the writer's COPY waits and the
webhook spools meanwhile (docs/audit-write-path.md).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0018_audit_would_deny_index"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_namespace_created"),
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_preset_created"),
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_user_created"),
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_created_desc"),
        migrations.AddIndex(model_name="admissionaudit",
                            index=models.Index(fields=["created_at", "id"], name="audit_created")),
        migrations.AddIndex(model_name="admissionaudit",
                            index=models.Index(fields=["namespace"], name="audit_namespace")),
        migrations.AddIndex(model_name="admissionaudit",
                            index=models.Index(fields=["preset_name"], name="audit_preset")),
        migrations.AddIndex(model_name="admissionaudit",
                            index=models.Index(fields=["username"], name="audit_user")),
    ]
