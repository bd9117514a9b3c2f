"""The uid index of the writer's replay check only on the days it reads (issue 16, bytes per row).

The replay check (mutations/audit/inserters.py) looks a batch's uids up in the partitions within 10 minutes of
its rows, one by one by name; nothing else reads request_uid by equality (the admin's uid search goes with its
Pod-name search, which scans). audit_request_uid_hash, made on the table by 0015, put a hash entry of every row
of every day kept in it: 37 bytes a row at 20,000,000 rows, 3.6 % of the row with its indexes. It becomes one
hash index per partition, made with the partition for today, the days ahead and UID_INDEX_DAYS_BEHIND (2) days
back, and on DEFAULT, and dropped by the writers (and create_audit_partitions) from a day that gets older
(mutations/audit/partitions.py). Dropping the table's index is quick; building today's and the recent days'
reads those days under their SHARE lock (the writer's COPY waits, the webhook spools meanwhile).

On SQLite (development) nothing changes: it has no partitions, and keeps 0015's plain index.
"""

import re
from datetime import UTC, date, datetime, timedelta

from django.db import migrations

TABLE = "mutations_admissionaudit"
DAYS_BEHIND = 2  # partitions.UID_INDEX_DAYS_BEHIND when this was written
NAME = re.compile(rf"^{TABLE}_p(\d{{8}})$")


def partitions(cursor) -> list[str]:
    cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "WHERE i.inhparent = %s::regclass", [TABLE])
    return sorted(name for (name,) in cursor.fetchall())


def per_partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    keep_from = datetime.now(UTC).date() - timedelta(days=DAYS_BEHIND)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute('DROP INDEX IF EXISTS "audit_request_uid_hash"')
        for name in partitions(cursor):
            match = NAME.match(name)
            if match and date(int(match[1][:4]), int(match[1][4:6]), int(match[1][6:])) < keep_from:
                continue
            cursor.execute(f'CREATE INDEX IF NOT EXISTS "{name}_uid" ON "{name}" USING hash (request_uid)')


def on_the_table(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for name in partitions(cursor):
            cursor.execute(f'DROP INDEX IF EXISTS "{name}_uid"')
        cursor.execute(f'CREATE INDEX "audit_request_uid_hash" ON "{TABLE}" USING hash ("request_uid")')


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0020_audit_would_deny_namespace_index"),
    ]

    operations = [
        migrations.RunPython(per_partition, on_the_table),
    ]
