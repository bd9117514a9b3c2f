"""Each audit row says whether its caller was authenticated (mTLS): a small boolean, with a database
default so spooled rows of the previous release load as "not verified" and adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0008_unconverted_pod_scan"),
    ]

    operations = [
        migrations.AddField(
            model_name="admissionaudit",
            name="caller_verified",
            field=models.BooleanField(
                db_default=False, default=False,
                help_text="The caller presented a client certificate verified against TLS_CLIENT_CA_FILE (mTLS).",
            ),
        ),
    ]
