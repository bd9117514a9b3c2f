"""One trigram index for the history's Pod-name search, instead of one per name column.

The history's free-text filter is `pod_name LIKE '%term%' OR generate_name LIKE '%term%'`
(dashboard/filters.py). A multicolumn GIN index answers it as two bitmap scans of the same index,
as fast as the two single-column indexes did, and each audit INSERT updates one GIN index instead
of two: PostgreSQL CPU per audit row, scripts/bench-audit-write with the indexes switched by SQL,
alternating runs on the 2-core development machine: 49-52 us with two indexes, 45-48 us with one.

CREATE INDEX blocks writes to the table while it builds (0.6-0.7 s per 100,000 rows here):
admissions are answered meanwhile and their audit rows wait in the spool. PostgreSQL only, like
migration 0002, which created the two indexes: SQLite (development) has no trigram index.
"""

from django.db import migrations

TABLE = "mutations_admissionaudit"
MERGED = "audit_pod_names_trgm"
SINGLE = {"audit_pod_name_trgm": "pod_name", "audit_generate_name_trgm": "generate_name"}


def merge(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{MERGED}" ON "{TABLE}" '
                          'USING gin ("pod_name" gin_trgm_ops, "generate_name" gin_trgm_ops)')
    for name in SINGLE:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def split(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, column in SINGLE.items():
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{TABLE}" USING gin ("{column}" gin_trgm_ops)')
    schema_editor.execute(f'DROP INDEX IF EXISTS "{MERGED}"')


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0005_audit_json_columns_as_json'),
    ]

    operations = [
        migrations.RunPython(merge, split),
    ]
