"""The audit row's detail columns (containers, resources_before, patch, warnings) stored compressed.

An audit row is about 1.2 KB, under PostgreSQL's 2 KB TOAST threshold, so PostgreSQL compresses none
of it; most of it is these four JSON values, made of the same annotation keys, resource paths and
phrases every time. mutations/compression stores each as an LZ4 block with that vocabulary as a
dictionary (`bytea`). What it saves and costs: docs/audit-rollup.md, "Bytes per row".

PostgreSQL: every row is copied into a new table with the same day partitions, its detail values
compressed on the way (COPY out, compress in Python, COPY in, one hour of rows at a time); then the
indexes, the rollups' triggers and the id sequence move to it. One transaction, holding the table's
lock: the dashboard waits, the webhook answers and spools. How long per million rows: docs/audit-rollup.md,
"Upgrading". Reversible the same way. SQLite (development) keeps JSON text: only the model changes.
"""

import importlib
import json
from datetime import timedelta

from django.db import migrations

import mutations.compression

_0010 = importlib.import_module("mutations.migrations.0010_audit_partitioned_by_day")

TABLE = "mutations_admissionaudit"
OLD = f"{TABLE}_before_0014"
DETAIL = ("containers", "resources_before", "patch", "warnings")
STEP = timedelta(hours=6)


def _copy_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            n = raw[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r"}.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _to_compressed(raw: str) -> str:
    if raw == "\\N":
        return raw
    data = json.dumps(json.loads(_unescape(raw)), ensure_ascii=False, separators=(",", ":")).encode()
    return "\\\\x" + mutations.compression.detail_compress(data).hex()


def _to_json(raw: str) -> str:
    if raw == "\\N":
        return raw
    blob = bytes.fromhex(_unescape(raw)[2:])
    return _copy_escape(mutations.compression.detail_decompress(blob).decode())


def _rebuild(schema_editor, model, *, target_type: str, convert) -> None:
    connection = schema_editor.connection
    cursor = connection.cursor()
    cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    cursor.execute(_0010.DROP_TRIGGERS.split("DROP FUNCTION")[0])  # the triggers go with the old table
    cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "WHERE i.inhparent = %s::regclass", [TABLE])
    partitions = [name for (name,) in cursor.fetchall()]
    cursor.execute(f'ALTER TABLE "{TABLE}" RENAME TO "{OLD}"')
    for name in partitions:
        cursor.execute(f'ALTER TABLE "{name}" RENAME TO "{name}_old"')
    cursor.execute(f'CREATE TABLE "{TABLE}" (LIKE "{OLD}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                   "INCLUDING STORAGE) PARTITION BY RANGE (created_at)")
    cursor.execute(f'ALTER TABLE "{TABLE}" ' + ", ".join(
        f'ALTER COLUMN "{c}" DROP DEFAULT, ALTER COLUMN "{c}" TYPE {target_type} USING NULL' for c in DETAIL))
    for name in partitions:
        cursor.execute("SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE relname = %s",
                       [f"{name}_old"])
        bound = cursor.fetchone()[0]
        cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{TABLE}" {bound}')
    cursor.execute(f"ALTER SEQUENCE \"{TABLE}_id_seq\" OWNED BY \"{TABLE}\".id")
    columns = [f.column for f in model._meta.concrete_fields]
    positions = [i for i, c in enumerate(columns) if c in DETAIL]
    names = ", ".join(f'"{c}"' for c in columns)
    selected = ", ".join(f'"{c}"::text' if c in DETAIL else f'"{c}"' for c in columns)
    raw = cursor.cursor
    for name in partitions:
        # an hour range at a time keeps the memory small: rows out, compressed or expanded, rows in
        cursor.execute(f'SELECT min(created_at), max(created_at) FROM "{name}_old"')
        low, high = cursor.fetchone()
        while low is not None and low <= high:
            lines = []
            with raw.copy(f'COPY (SELECT {selected} FROM "{name}_old" WHERE created_at >= \'{low.isoformat()}\' '
                          f"AND created_at < '{(low + STEP).isoformat()}') TO STDOUT") as out:
                for block in out:
                    lines.append(bytes(block))
            text = b"".join(lines).decode()
            converted = []
            for line in text.split("\n"):
                if not line:
                    continue
                fields = line.split("\t")
                for i in positions:
                    fields[i] = convert(fields[i])
                converted.append("\t".join(fields))
            if converted:
                with raw.copy(f'COPY "{TABLE}" ({names}) FROM STDIN') as into:
                    into.write(("\n".join(converted) + "\n").encode())
            low += STEP
    cursor.execute(f'DROP TABLE "{OLD}"')
    cursor.execute(f'ALTER TABLE "{TABLE}" ADD PRIMARY KEY (id, created_at)')
    for index in model._meta.indexes:
        schema_editor.add_index(model, index)
    cursor.execute(f'CREATE INDEX "{_0010.TRIGRAM}" ON "{TABLE}" USING gin (pod_name gin_trgm_ops, '
                   "generate_name gin_trgm_ops)")
    cursor.execute(_0010.ROLLUP_FUNCTION)
    cursor.execute(f'ANALYZE "{TABLE}"')


def compress(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _rebuild(schema_editor, apps.get_model("mutations", "AdmissionAudit"), target_type="bytea", convert=_to_compressed)


def expand(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _rebuild(schema_editor, apps.get_model("mutations", "AdmissionAudit"), target_type="json", convert=_to_json)


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0013_audit_engine_inputs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(compress, expand)],
            state_operations=[
                migrations.AlterField(
                    model_name="admissionaudit", name="containers",
                    field=mutations.compression.CompressedJSONField(
                        default=list, help_text="Per container: asked for, granted count, MiB, cores."),
                ),
                migrations.AlterField(
                    model_name="admissionaudit", name="patch",
                    field=mutations.compression.CompressedJSONField(default=list),
                ),
                migrations.AlterField(
                    model_name="admissionaudit", name="resources_before",
                    field=mutations.compression.CompressedJSONField(
                        blank=True, default=list,
                        help_text="Per container as the Pod arrived: name, init, and its resources (limits/requests)."),
                ),
                migrations.AlterField(
                    model_name="admissionaudit", name="warnings",
                    field=mutations.compression.CompressedJSONField(default=list),
                ),
            ],
        ),
    ]
