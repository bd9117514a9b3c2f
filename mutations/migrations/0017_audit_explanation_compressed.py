"""A denial's explanation stored compressed, with a dictionary of the engine's own words.

An explanation is about 1 KB of JSON (the rule texts, message templates and fixes, mostly the same words
every time), kept for every denial and every audit-only row: about 90 of the bytes an average row takes.
Compressed with mutations/compression's dictionary 2 (built from the engine's source by
build_explanation_dictionary) it takes about 190 bytes. docs/audit-rollup.md, "Bytes per row".

PostgreSQL: the column becomes `bytea`; the explanations already written are kept as they are, marked
"no dictionary" (a first byte of 0, then the JSON text: mutations.compression.RAW), which readers
understand, so no row is decompressed or recompressed here. That is one ALTER COLUMN: PostgreSQL rewrites
each day partition, holding the table's lock (the webhook spools meanwhile). Reversible: the reverse
decompresses the rows written since in Python. SQLite (development) keeps JSON text: only the model changes.
"""

import json

from django.db import migrations

import mutations.compression

TABLE = "mutations_admissionaudit"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f'ALTER TABLE "{TABLE}" ALTER COLUMN "explanation" TYPE bytea USING '
        "CASE WHEN explanation IS NULL THEN NULL ELSE '\\x00'::bytea || convert_to(explanation::text, 'UTF8') END")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{TABLE}" ADD COLUMN "explanation_json" json')
        cursor.execute(f'SELECT id, created_at, explanation FROM "{TABLE}" WHERE explanation IS NOT NULL')
        rows = cursor.fetchall()
        for audit_id, created_at, blob in rows:
            text = mutations.compression.detail_decompress(bytes(blob)).decode()
            cursor.execute(f'UPDATE "{TABLE}" SET explanation_json = %s WHERE id = %s AND created_at = %s',
                           [json.dumps(json.loads(text)), audit_id, created_at])
        cursor.execute(f'ALTER TABLE "{TABLE}" DROP COLUMN "explanation"')
        cursor.execute(f'ALTER TABLE "{TABLE}" RENAME COLUMN "explanation_json" TO "explanation"')


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0016_audit_trigram_pending_list"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="admissionaudit",
                    name="explanation",
                    field=mutations.compression.CompressedJSONField(
                        blank=True, default=None, dictionary=2, null=True,
                        help_text="For a denial: what was asked for, where the size came from, every rule broken, "
                                  "and fixes."),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
