"""Store the audit row's JSON columns as `json` (validated text) instead of `jsonb`.

Nothing queries inside these columns; they are written once and shown whole. jsonb parses every
value into a tree as it is written, the largest single cost of writing a row (scripts/bench-audit-write:
docs/benchmarks.md).

One ALTER TABLE for the four columns, so PostgreSQL rewrites the table once, under an ACCESS
EXCLUSIVE lock: the dashboard and the audit API wait for it, and the webhook keeps answering (its
rows wait in the spool and are written afterwards). How long it takes per 100,000 rows:
docs/benchmarks.md and deploy/README.md, "Upgrading". The columns keep lz4 compression (0004).
SQLite (development) stores JSON as text either way: nothing to do there.
"""

import importlib

from django.db import migrations

import mutations.models

_lz4_supported = importlib.import_module("mutations.migrations.0004_audit_lz4_compression")._lz4_supported

TABLE = "mutations_admissionaudit"
COLUMNS = ("containers", "resources_before", "patch", "warnings")


def _retype(target: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            lz4 = _lz4_supported(cursor)
        clauses = []
        for column in COLUMNS:
            clauses.append(f'ALTER COLUMN "{column}" TYPE {target} USING "{column}"::{target}')
            if lz4:  # a new type resets the column's compression to the default (pglz)
                clauses.append(f'ALTER COLUMN "{column}" SET COMPRESSION lz4')
        schema_editor.execute(f'ALTER TABLE "{TABLE}" {", ".join(clauses)}')

    return apply


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0004_audit_lz4_compression'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_retype("json"), _retype("jsonb"))],
            state_operations=[
                migrations.AlterField(
                    model_name='admissionaudit',
                    name='containers',
                    field=mutations.models.StoredJSONField(default=list, help_text='Per container: asked for, granted count, MiB, cores.'),
                ),
                migrations.AlterField(
                    model_name='admissionaudit',
                    name='patch',
                    field=mutations.models.StoredJSONField(default=list),
                ),
                migrations.AlterField(
                    model_name='admissionaudit',
                    name='resources_before',
                    field=mutations.models.StoredJSONField(blank=True, default=list, help_text='Per container as the Pod arrived: name, init, and its resources (limits/requests).'),
                ),
                migrations.AlterField(
                    model_name='admissionaudit',
                    name='warnings',
                    field=mutations.models.StoredJSONField(default=list),
                ),
            ],
        ),
    ]
