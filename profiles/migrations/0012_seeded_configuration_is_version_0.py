"""The configuration the migrations seed is version 0, not 1.

0002 seeded the version counter at 1, and change ids (the versions since 0007) could start at 1 too (SQLite
has no sequence to move): an admission decided before any change then carried the version of a change made
after it. Version 0 is what no change can be: where the log is still empty, the seeded version becomes 0.
"""

from django.db import migrations


def seeded_is_version_0(apps, schema_editor):
    db = schema_editor.connection.alias
    if apps.get_model("profiles", "ObjectChange").objects.using(db).exists():
        return  # changes were made: the version is the last one's id
    apps.get_model("profiles", "ConfigVersion").objects.using(db).filter(pk=1).update(version=0)


class Migration(migrations.Migration):

    dependencies = [
        ("profiles", "0011_labels_bounds_reason_inherited"),
    ]

    operations = [
        migrations.RunPython(seeded_is_version_0, migrations.RunPython.noop),
    ]
