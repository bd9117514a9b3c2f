"""The would-deny rows by namespace, for a namespace's rehearsal (its count of the week and its newest rows).

Through audit_would_deny (time only) the rehearsal of one namespace read every namespace's would-deny rows of
the week and dropped the others': 29,000 rows and 150 ms at 20,000,000 rows. A partial index: only those
rows (about 1.4 in a hundred of fill_audit's), under a byte a row on average.

Building it reads the whole table under its SHARE lock, as any CREATE INDEX (the writer's COPY waits and the
webhook spools meanwhile): measured in docs/audit-rollup.md.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0019_audit_one_column_filter_indexes'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='admissionaudit',
            index=models.Index(condition=models.Q(('decision', 'audit-only'), ('reason__startswith', 'would deny')), fields=['namespace', 'created_at', 'id'], name='audit_would_deny_namespace'),
        ),
    ]
