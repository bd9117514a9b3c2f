"""The configuration change log (profiles.ObjectChange), whose ids become the configuration version.

Existing databases already have a version (a counter bumped on every change): the ids start above it,
so the version keeps going up across the upgrade and no earlier version is ever reused.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def start_ids_above_the_version(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    ConfigVersion = apps.get_model("profiles", "ConfigVersion")
    ObjectChange = apps.get_model("profiles", "ObjectChange")
    version = ConfigVersion.objects.using(schema_editor.connection.alias).filter(pk=1).values_list(
        "version", flat=True).first() or 0
    with schema_editor.connection.cursor() as cursor:
        # setval(seq, n, true): the next id is n + 1.
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, true)",
                       [ObjectChange._meta.db_table, max(version, 1)])


class Migration(migrations.Migration):

    dependencies = [
        ('profiles', '0006_preset_kv_cache_sequences'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ObjectChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('time', models.DateTimeField()),
                ('user_name', models.CharField(help_text="The user (or the API token's user), or system.", max_length=150)),
                ('through', models.CharField(choices=[('admin', 'Admin'), ('api', 'Api'), ('command', 'Command'), ('shell', 'Shell'), ('system', 'System')], max_length=16)),
                ('request_id', models.CharField(blank=True, help_text='The HTTP request (X-Request-Id) or command run that made the change.', max_length=64)),
                ('action', models.CharField(choices=[('create', 'Create'), ('update', 'Update'), ('delete', 'Delete')], max_length=16)),
                ('object_type', models.CharField(help_text='The model, e.g. preset, gpumodel, namespacepolicy.', max_length=64)),
                ('object_id', models.BigIntegerField()),
                ('object_repr', models.CharField(help_text="The object's name (a policy's namespace) after the change, before it for a delete.", max_length=253)),
                ('prechange_data', models.JSONField(blank=True, null=True)),
                ('postchange_data', models.JSONField(blank=True, null=True)),
                ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'configuration change',
                'ordering': ['-id'],
                'indexes': [models.Index(fields=['object_type', 'object_id', '-id'], name='objectchange_object'), models.Index(fields=['object_type', 'object_repr', '-id'], name='objectchange_name'), models.Index(fields=['user_name', '-id'], name='objectchange_user'), models.Index(fields=['time'], name='objectchange_time')],
            },
        ),
        migrations.RunPython(start_ids_above_the_version, migrations.RunPython.noop),
    ]
