"""The overview's hourly rollup of the audit table (mutations/audit/rollup.py).

The tables start empty, with the mark at 0: the overview is right from the start (it counts the
rows above the mark from the audit table), and fast once the rollup has caught up. Each overview
page counts at most ROLLUP_REFRESH_MAX_ROWS new rows; `manage.py refresh_audit_rollup` counts
all of them at once (deploy/README.md, upgrade notes).
"""

from django.db import migrations, models


def create_mark(apps, schema_editor):
    apps.get_model("mutations", "AuditRollupMark").objects.using(schema_editor.connection.alias).create(
        id=1, last_audit_id=0, version=0)


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0006_audit_one_trigram_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditRollupMark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('last_audit_id', models.BigIntegerField(default=0)),
                ('version', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='AuditRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField(help_text='Start of the hour (UTC).')),
                ('decision', models.CharField(max_length=16)),
                ('namespace', models.CharField(blank=True, max_length=253)),
                ('preset_name', models.CharField(blank=True, max_length=63)),
                ('admissions', models.PositiveBigIntegerField(default=0)),
                ('vgpu_memory_mib', models.PositiveBigIntegerField(default=0, help_text='Total MiB granted by these admissions.')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('hour', 'decision', 'namespace', 'preset_name'), name='audit_rollup_key')],
            },
        ),
        migrations.RunPython(create_mark, migrations.RunPython.noop),
    ]
