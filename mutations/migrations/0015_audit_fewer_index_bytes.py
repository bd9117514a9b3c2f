"""Fewer index bytes per audit row (docs/audit-rollup.md, "Bytes per row").

- audit_created_desc loses its INCLUDE columns: they served the overview's index-only aggregates,
  and the overview reads the rollups now (0010).
- audit_decision_created goes: six decisions, the rarest in about 2 % of rows, so a page of any of
  them is among the newest rows of audit_created_desc; the overview's latest problems read that too.
- The trigram index of the Pod-name search is rebuilt with `fastupdate = off`: built row by row as
  rows arrive, a GIN index with its pending list (the default) grew to about 500 bytes a row at
  1,000,000 rows; inserting into the index directly packs it at about 100.
- The uid's index becomes a hash index (PostgreSQL): the writer's replay check only asks for equality,
  and a hash index stores a 4-byte hash per row instead of the uid. Not part of the model's state, as
  for the trigram index: SQLite (development) gets a plain index instead.

Dropping an index is quick; building them takes the table's SHARE lock (writes wait and spool meanwhile).
"""

from django.db import migrations, models

TABLE = "mutations_admissionaudit"


TRIGRAM = "audit_pod_names_trgm"


def _trigram(options: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute(f'DROP INDEX IF EXISTS "{TRIGRAM}"')
        schema_editor.execute(f'CREATE INDEX "{TRIGRAM}" ON "{TABLE}" USING gin (pod_name gin_trgm_ops, '
                              f"generate_name gin_trgm_ops){options}")

    return apply


def uid_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'CREATE INDEX "audit_request_uid_hash" ON "{TABLE}" USING hash ("request_uid")')
    else:
        schema_editor.execute(f'CREATE INDEX "audit_request_uid_hash" ON "{TABLE}" ("request_uid")')


def no_uid_index(apps, schema_editor):
    schema_editor.execute('DROP INDEX IF EXISTS "audit_request_uid_hash"')


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0014_audit_detail_compressed"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_request_uid"),
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_decision_created"),
        migrations.RemoveIndex(model_name="admissionaudit", name="audit_created_desc"),
        migrations.AddIndex(
            model_name="admissionaudit",
            index=models.Index(fields=["-created_at", "-id"], name="audit_created_desc"),
        ),
        migrations.RunPython(uid_index, no_uid_index),
        # every day partition made later copies the parent index's fastupdate = off
        migrations.RunPython(_trigram(" WITH (fastupdate = off)"), _trigram("")),
    ]
