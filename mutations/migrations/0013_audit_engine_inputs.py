"""Each audit row keeps what the engine reads of the Pod beyond resources_before (pod_inputs), so the impact
report can replay it under a draft configuration; a json column with a database default, so spooled rows of
the previous release load as {} and adding it rewrites nothing."""

from django.db import migrations

import mutations.models


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0012_audit_config_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='admissionaudit',
            name='inputs',
            field=mutations.models.StoredJSONField(blank=True, db_default={}, default=dict, help_text="What the engine reads of the Pod beyond containers' resources (compact; see pod_inputs)."),
        ),
    ]
