"""One trigram index for the history's Pod-name search, instead of one per name column.

The history's free-text filter is `pod_name LIKE '%term%' OR generate_name LIKE '%term%'`
(mutations/audit/filters.py). A multicolumn GIN index answers it as two bitmap scans of the same
index, as fast as the two single-column indexes did, and each audit row written updates one GIN
index instead of two, which costs PostgreSQL less CPU per row (scripts/bench-audit-write with the
indexes switched by SQL: docs/benchmarks.md).

CREATE INDEX blocks writes to the table while it builds (how long: docs/benchmarks.md):
admissions are answered meanwhile and their audit rows wait in the spool. PostgreSQL only, like
migration 0002, which created the two indexes: SQLite (development) has no trigram index.
"""

import importlib

from django.db import migrations

# The two single-column indexes are 0002's: its helpers create and drop them, here in reverse.
_single = importlib.import_module("mutations.migrations.0002_audit_history")

TABLE = "mutations_admissionaudit"
MERGED = "audit_pod_names_trgm"


def merge(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{MERGED}" ON "{TABLE}" '
                          'USING gin ("pod_name" gin_trgm_ops, "generate_name" gin_trgm_ops)')
    _single.drop_trigram_indexes(apps, schema_editor)


def split(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _single.create_trigram_indexes(apps, schema_editor)
    schema_editor.execute(f'DROP INDEX IF EXISTS "{MERGED}"')


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0005_audit_json_columns_as_json'),
    ]

    operations = [
        migrations.RunPython(merge, split),
    ]
