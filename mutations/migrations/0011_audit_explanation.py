"""A denial's explanation on its audit row (what was asked, where the size came from, every rule broken,
fixes): a nullable json column, NULL for the other decisions, so adding it rewrites no row and spooled rows
of the previous release load as they are."""

from django.db import migrations

import mutations.models


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0010_audit_partitioned_by_day"),
    ]

    operations = [
        migrations.AddField(
            model_name="admissionaudit",
            name="explanation",
            field=mutations.models.StoredJSONField(
                blank=True, default=None, null=True,
                help_text="For a denial: what was asked for, where the size came from, every rule broken, and fixes.",
            ),
        ),
    ]
