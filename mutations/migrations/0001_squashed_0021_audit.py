"""The audit store's schema as migrations 0001-0021 left it, in one migration (issue 29).

Those 21 migrations rewrote the table three times (0005, 0010, 0014), made and dropped indexes, and loaded
each other's code; this one makes their end state directly. A database that applied all of them has nothing
to do here (`replaces`): Django records this migration as applied. A database part of the way through them
must first be migrated by the release that still has them (deploy/README.md, "The squashed migrations").

PostgreSQL: the audit table is partitioned by UTC day (sql/audit_table_v1.sql), with the indexes the model
declares, the trigram index of the Pod-name search (sql/audit_pod_names_trigram_v1.sql), the day partitions
from yesterday to a week ahead with their uid indexes, and the rollups' triggers (sql/audit_rollup_trigger_v1.sql).
The partitions are made by the code the writers make them with at run time (mutations/audit/partitions.py),
on purpose: which days exist is run-time state, and its names and numbers are the code's. SQLite
(development): one plain table, its declared indexes and a plain index on request_uid.
tests/test_migrations_squashed.py compares the schema this makes with a snapshot of the old chain's.
"""

from pathlib import Path

from django.db import migrations, models

import mutations.compression
import mutations.models
from mutations.audit import partitions

SQL = Path(__file__).resolve().parent.parent / "sql"
TABLE = partitions.TABLE


def sql_run(schema_editor, name: str) -> None:
    """Run one of mutations/sql's files as it is (no parameters: its text is not a format string)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute((SQL / name).read_text())


def audit_table_create(apps, schema_editor):
    model = apps.get_model("mutations", "AdmissionAudit")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.create_model(model)
        # The writer's replay check looks uids up by equality (mutations/audit/inserters.py).
        schema_editor.execute(f'CREATE INDEX "audit_request_uid_hash" ON "{TABLE}" ("request_uid")')
        return
    sql_run(schema_editor, "audit_table_v1.sql")
    # In the model's order: each partition names its copy of an index after the columns, numbered in this
    # order when two share them (audit_created's is ..._created_at_id_idx, audit_would_deny's ..._idx1).
    for index in model._meta.indexes:
        schema_editor.add_index(model, index)
    sql_run(schema_editor, "audit_pod_names_trigram_v1.sql")
    with schema_editor.connection.cursor() as cursor:
        partitions.uid_index_create(cursor, partitions.DEFAULT_PARTITION)
        partitions.audit_partitions_create(cursor)


def audit_table_drop(apps, schema_editor):
    schema_editor.delete_model(apps.get_model("mutations", "AdmissionAudit"))  # its partitions go with it


def rollup_triggers_create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        sql_run(schema_editor, "audit_rollup_trigger_v1.sql")


def rollup_triggers_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        sql_run(schema_editor, "audit_rollup_trigger_v1_drop.sql")


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('mutations', '0001_initial'),
        ('mutations', '0002_audit_history'),
        ('mutations', '0003_audit_request_uid_constraint'),
        ('mutations', '0004_audit_lz4_compression'),
        ('mutations', '0005_audit_json_columns_as_json'),
        ('mutations', '0006_audit_one_trigram_index'),
        ('mutations', '0007_audit_rollup'),
        ('mutations', '0008_unconverted_pod_scan'),
        ('mutations', '0009_audit_caller_verified'),
        ('mutations', '0010_audit_partitioned_by_day'),
        ('mutations', '0011_audit_explanation'),
        ('mutations', '0012_audit_config_version'),
        ('mutations', '0013_audit_engine_inputs'),
        ('mutations', '0014_audit_detail_compressed'),
        ('mutations', '0015_audit_fewer_index_bytes'),
        ('mutations', '0016_audit_trigram_pending_list'),
        ('mutations', '0017_audit_explanation_compressed'),
        ('mutations', '0018_audit_would_deny_index'),
        ('mutations', '0019_audit_one_column_filter_indexes'),
        ('mutations', '0020_audit_would_deny_namespace_index'),
        ('mutations', '0021_audit_uid_index_on_recent_days'),
    ]

    dependencies = [
    ]

    operations = [
        # The models in the old chain's order, which the content types (and their permissions' ids) follow.
        # The audit table is partitioned on PostgreSQL, which Django cannot make: the model state here, the
        # table by audit_table_create (the state must come first, for it to read the model).
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='AdmissionAudit',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('created_at', models.DateTimeField()),
                    ('request_uid', models.CharField(max_length=128)),
                    ('operation', models.CharField(default='CREATE', max_length=16)),
                    ('namespace', models.CharField(blank=True, max_length=253)),
                    ('pod_name', models.CharField(blank=True, max_length=253)),
                    ('generate_name', models.CharField(blank=True, max_length=253)),
                    ('owner_kind', models.CharField(blank=True, max_length=63)),
                    ('owner_name', models.CharField(blank=True, max_length=253)),
                    ('username', models.CharField(blank=True, max_length=256)),
                    ('decision', models.CharField(choices=[('mutated', 'mutated'), ('unchanged', 'unchanged'), ('skipped', 'skipped'), ('audit-only', 'audit-only'), ('denied', 'denied'), ('error', 'error')], max_length=16)),
                    ('reason', models.TextField(blank=True)),
                    ('field', models.CharField(blank=True, help_text='For a denial: the field or annotation at fault.', max_length=256)),
                    ('preset_name', models.CharField(blank=True, max_length=63)),
                    ('policy_name', models.CharField(blank=True, max_length=253)),
                    ('source', models.CharField(blank=True, help_text='What decided the vGPU memory.', max_length=128)),
                    ('gpus_requested', models.DecimalField(decimal_places=3, default=0, max_digits=12)),
                    ('vgpus_granted', models.PositiveIntegerField(default=0)),
                    ('vgpu_memory_mib', models.PositiveBigIntegerField(default=0, help_text='Total MiB granted across vGPUs.')),
                    ('containers', mutations.compression.CompressedJSONField(default=list, help_text='Per container: asked for, granted count, MiB, cores.')),
                    ('patch', mutations.compression.CompressedJSONField(default=list)),
                    ('warnings', mutations.compression.CompressedJSONField(default=list)),
                    ('dry_run', models.BooleanField(default=False)),
                    ('duration_ms', models.FloatField(default=0)),
                    ('replica', models.CharField(blank=True, max_length=253)),
                    ('resources_before', mutations.compression.CompressedJSONField(blank=True, default=list, help_text='Per container as the Pod arrived: name, init, and its resources (limits/requests).')),
                    ('caller_verified', models.BooleanField(db_default=False, default=False, help_text='The caller presented a client certificate verified against TLS_CLIENT_CA_FILE (mTLS).')),
                    ('explanation', mutations.compression.CompressedJSONField(blank=True, default=None, dictionary=2, help_text='For a denial: what was asked for, where the size came from, every rule broken, and fixes.', null=True)),
                    ('config_version', models.BigIntegerField(db_default=0, default=0, help_text='Configuration version (change-log id) in force when the webhook decided; 0 when unknown.')),
                    ('inputs', mutations.models.StoredJSONField(blank=True, db_default={}, default=dict, help_text="What the engine reads of the Pod beyond containers' resources (compact; see pod_inputs).")),
                ],
                options={
                    'verbose_name': 'admission audit record',
                    'ordering': ['-created_at', '-id'],
                    'indexes': [models.Index(fields=['created_at', 'id'], name='audit_created'), models.Index(fields=['namespace'], name='audit_namespace'), models.Index(fields=['preset_name'], name='audit_preset'), models.Index(fields=['username'], name='audit_user'), models.Index(fields=['vgpu_memory_mib', 'id'], name='audit_memory'), models.Index(fields=['duration_ms', 'id'], name='audit_duration'), models.Index(condition=models.Q(('decision', 'audit-only'), ('reason__startswith', 'would deny')), fields=['-created_at', '-id'], name='audit_would_deny'), models.Index(condition=models.Q(('decision', 'audit-only'), ('reason__startswith', 'would deny')), fields=['namespace', 'created_at', 'id'], name='audit_would_deny_namespace')],
                },
            ),
        ]),
        migrations.RunPython(audit_table_create, audit_table_drop),
        migrations.CreateModel(
            name='AuditRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField(help_text='Start of the hour (UTC).')),
                ('decision', models.CharField(max_length=16)),
                ('namespace', models.CharField(blank=True, max_length=253)),
                ('preset_name', models.CharField(blank=True, max_length=63)),
                ('admissions', models.PositiveBigIntegerField(default=0)),
                ('vgpu_memory_mib', models.DecimalField(decimal_places=0, default=0, help_text='Total MiB granted by these admissions.', max_digits=38)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('hour', 'decision', 'namespace', 'preset_name'), name='audit_rollup_key')],
            },
        ),
        migrations.CreateModel(
            name='UnconvertedPodScan',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('finished_at', models.DateTimeField()),
                ('succeeded', models.BooleanField()),
                ('error', models.TextField(blank=True, help_text='Why the scan failed (empty when it succeeded).')),
                ('pods_examined', models.PositiveIntegerField(default=0, help_text='Pods listed (not finished ones).')),
                ('unconverted', models.PositiveIntegerField(default=0, help_text='GPU Pods found unconverted, in all.')),
                ('by_namespace', models.JSONField(blank=True, default=dict, help_text='Unconverted GPU Pods per namespace.')),
                ('pods', models.JSONField(blank=True, default=list, help_text='The first unconverted Pods found: namespace, name, phase, created, owner.')),
            ],
            options={
                'verbose_name': 'unconverted GPU Pod scan',
                'ordering': ['-finished_at', '-id'],
                'indexes': [models.Index(fields=['-finished_at', '-id'], name='unconverted_scan_finished')],
            },
        ),
        migrations.CreateModel(
            name='AuditRollupDaily',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateTimeField(help_text='Start of the day (UTC).')),
                ('decision', models.CharField(max_length=16)),
                ('namespace', models.CharField(blank=True, max_length=253)),
                ('preset_name', models.CharField(blank=True, max_length=63)),
                ('admissions', models.PositiveBigIntegerField(default=0)),
                ('vgpu_memory_mib', models.DecimalField(decimal_places=0, default=0, help_text='Total MiB granted by these admissions.', max_digits=38)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('day', 'decision', 'namespace', 'preset_name'), name='audit_rollup_daily_key')],
            },
        ),
        # After the rollup tables: the triggers write to them.
        migrations.RunPython(rollup_triggers_create, rollup_triggers_drop),
    ]
