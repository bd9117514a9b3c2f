"""Each audit row records the configuration version it was decided under (the change log's id,
profiles.ObjectChange): a bigint with a database default, so spooled rows of the previous release load
as 0 ("unknown") and adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mutations', '0011_audit_explanation'),
    ]

    operations = [
        migrations.AddField(
            model_name='admissionaudit',
            name='config_version',
            field=models.BigIntegerField(db_default=0, default=0, help_text='Configuration version (change-log id) in force when the webhook decided; 0 when unknown.'),
        ),
    ]
