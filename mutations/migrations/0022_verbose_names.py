"""Every audit field labelled in words (verbose_name only: no SQL, so the partitioned table is not touched)."""

from django.db import migrations, models

import mutations.compression
import mutations.models


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0001_squashed_0021_audit'),
    ]

    operations = [
        migrations.AlterField(
            model_name='admissionaudit',
            name='caller_verified',
            field=models.BooleanField(db_default=False, default=False, help_text='The caller presented a client certificate verified against TLS_CLIENT_CA_FILE (mTLS).', verbose_name='caller verified (mTLS)'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='config_version',
            field=models.BigIntegerField(db_default=0, default=0, help_text='Configuration version (change-log id) in force when the webhook decided; 0 when unknown.', verbose_name='configuration version'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='containers',
            field=mutations.compression.CompressedJSONField(default=list, help_text='Per container: asked for, granted count, MiB, cores.', verbose_name='containers'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='created_at',
            field=models.DateTimeField(verbose_name='time'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='decision',
            field=models.CharField(choices=[('mutated', 'mutated'), ('unchanged', 'unchanged'), ('skipped', 'skipped'), ('audit-only', 'audit-only'), ('denied', 'denied'), ('error', 'error')], max_length=16, verbose_name='decision'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='dry_run',
            field=models.BooleanField(default=False, verbose_name='dry run'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='duration_ms',
            field=models.FloatField(default=0, verbose_name='time taken (ms)'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='explanation',
            field=mutations.compression.CompressedJSONField(blank=True, default=None, dictionary=2, help_text='For a denial: what was asked for, where the size came from, every rule broken, and fixes.', null=True, verbose_name='explanation'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='field',
            field=models.CharField(blank=True, help_text='For a denial: the field or annotation at fault.', max_length=256, verbose_name='field at fault'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='generate_name',
            field=models.CharField(blank=True, max_length=253, verbose_name='name prefix (generateName)'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='gpus_requested',
            field=models.DecimalField(decimal_places=3, default=0, max_digits=12, verbose_name='GPUs asked for'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='inputs',
            field=mutations.models.StoredJSONField(blank=True, db_default={}, default=dict, help_text="What the engine reads of the Pod beyond containers' resources (compact; see pod_inputs).", verbose_name='engine inputs'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='namespace',
            field=models.CharField(blank=True, max_length=253, verbose_name='namespace'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='operation',
            field=models.CharField(default='CREATE', max_length=16, verbose_name='operation'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='owner_kind',
            field=models.CharField(blank=True, max_length=63, verbose_name='owner kind'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='owner_name',
            field=models.CharField(blank=True, max_length=253, verbose_name='owner name'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='patch',
            field=mutations.compression.CompressedJSONField(default=list, verbose_name='JSON patch'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='pod_name',
            field=models.CharField(blank=True, max_length=253, verbose_name='Pod name'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='policy_name',
            field=models.CharField(blank=True, max_length=253, verbose_name='namespace policy'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='preset_name',
            field=models.CharField(blank=True, max_length=63, verbose_name='preset'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='reason',
            field=models.TextField(blank=True, verbose_name='reason'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='replica',
            field=models.CharField(blank=True, max_length=253, verbose_name='answered by'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='request_uid',
            field=models.CharField(max_length=128, verbose_name='request uid'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='resources_before',
            field=mutations.compression.CompressedJSONField(blank=True, default=list, help_text='Per container as the Pod arrived: name, init, and its resources (limits/requests).', verbose_name='resources before'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='source',
            field=models.CharField(blank=True, help_text='What decided the vGPU memory.', max_length=128, verbose_name='memory decided by'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='username',
            field=models.CharField(blank=True, max_length=256, verbose_name='user'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='vgpu_memory_mib',
            field=models.PositiveBigIntegerField(default=0, help_text='Total MiB granted across vGPUs.', verbose_name='granted vGPU memory in all (MiB)'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='vgpus_granted',
            field=models.PositiveIntegerField(default=0, verbose_name='granted vGPUs'),
        ),
        migrations.AlterField(
            model_name='admissionaudit',
            name='warnings',
            field=mutations.compression.CompressedJSONField(default=list, verbose_name='warnings'),
        ),
        migrations.AlterField(
            model_name='auditrollup',
            name='decision',
            field=models.CharField(max_length=16, verbose_name='decision'),
        ),
        migrations.AlterField(
            model_name='auditrollup',
            name='namespace',
            field=models.CharField(blank=True, max_length=253, verbose_name='namespace'),
        ),
        migrations.AlterField(
            model_name='auditrollup',
            name='preset_name',
            field=models.CharField(blank=True, max_length=63, verbose_name='preset'),
        ),
        migrations.AlterField(
            model_name='auditrollup',
            name='vgpu_memory_mib',
            field=models.DecimalField(decimal_places=0, default=0, help_text='Total MiB granted by these admissions.', max_digits=38, verbose_name='granted vGPU memory in all (MiB)'),
        ),
        migrations.AlterField(
            model_name='auditrollupdaily',
            name='decision',
            field=models.CharField(max_length=16, verbose_name='decision'),
        ),
        migrations.AlterField(
            model_name='auditrollupdaily',
            name='namespace',
            field=models.CharField(blank=True, max_length=253, verbose_name='namespace'),
        ),
        migrations.AlterField(
            model_name='auditrollupdaily',
            name='preset_name',
            field=models.CharField(blank=True, max_length=63, verbose_name='preset'),
        ),
        migrations.AlterField(
            model_name='auditrollupdaily',
            name='vgpu_memory_mib',
            field=models.DecimalField(decimal_places=0, default=0, help_text='Total MiB granted by these admissions.', max_digits=38, verbose_name='granted vGPU memory in all (MiB)'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='by_namespace',
            field=models.JSONField(blank=True, default=dict, help_text='Unconverted GPU Pods per namespace.', verbose_name='by namespace'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='error',
            field=models.TextField(blank=True, help_text='Why the scan failed (empty when it succeeded).', verbose_name='error'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='finished_at',
            field=models.DateTimeField(verbose_name='finished'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='pods',
            field=models.JSONField(blank=True, default=list, help_text='The first unconverted Pods found: namespace, name, phase, created, owner.', verbose_name='Pods'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='pods_examined',
            field=models.PositiveIntegerField(default=0, help_text='Pods listed (not finished ones).', verbose_name='Pods examined'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='succeeded',
            field=models.BooleanField(verbose_name='succeeded'),
        ),
        migrations.AlterField(
            model_name='unconvertedpodscan',
            name='unconverted',
            field=models.PositiveIntegerField(default=0, help_text='GPU Pods found unconverted, in all.', verbose_name='unconverted GPU Pods'),
        ),
    ]
