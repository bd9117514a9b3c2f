"""Compress the audit row's large columns with lz4 instead of pglz (PostgreSQL 14 and newer).

A typical row is just over 2 KiB, so PostgreSQL compresses its largest values on every row written.
pglz_compress was the largest single item in a profile of the audit writer's COPY (docs/benchmarks.md);
lz4 compresses several times faster and reads back faster. Existing rows keep
their compression until rewritten. Skipped where the server was built without lz4, and on SQLite.
"""

from django.db import migrations

COLUMNS = ("reason", "containers", "resources_before", "patch", "warnings")
TABLE = "mutations_admissionaudit"


def _lz4_supported(cursor) -> bool:
    cursor.execute(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    )
    row = cursor.fetchone()
    return bool(row and row[0])


def _set_compression(method: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            if method == "lz4" and not _lz4_supported(cursor):
                return
            for column in COLUMNS:
                cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN "{column}" SET COMPRESSION {method}')

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("mutations", "0003_audit_request_uid_constraint"),
    ]

    operations = [
        migrations.RunPython(_set_compression("lz4"), _set_compression("default")),
    ]
