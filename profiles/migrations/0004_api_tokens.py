"""API tokens stored as SHA-256 digests, with expiry and last use, instead of DRF's plaintext authtoken keys.

Existing tokens keep working: each key is hashed into an ApiToken that expires INJECTOR_API_TOKEN_DAYS
(90 by default) after this migration, and the plaintext rows are deleted. Reversing it cannot give the
keys back: it leaves the authtoken table empty (issue new tokens with the previous release).
"""

import hashlib
from datetime import timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def hash_plaintext_tokens(apps, schema_editor):
    from django.utils import timezone

    alias = schema_editor.connection.alias
    plaintext = apps.get_model("authtoken", "Token")
    hashed = apps.get_model("profiles", "ApiToken")
    expires_at = timezone.now() + timedelta(days=getattr(settings, "INJECTOR_API_TOKEN_DAYS", 90))
    hashed.objects.using(alias).bulk_create([
        hashed(user_id=row.user_id, digest=hashlib.sha256(row.key.encode()).hexdigest(), prefix=row.key[:8],
               created_at=row.created, expires_at=expires_at)
        for row in plaintext.objects.using(alias).all()
    ])
    plaintext.objects.using(alias).all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ('profiles', '0003_scheduling_and_budgets'),
        ('authtoken', '0004_alter_tokenproxy_options'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(help_text='SHA-256 of the token, hex.', max_length=64)),
                ('prefix', models.CharField(help_text="The token's first characters, to tell tokens apart.", max_length=12)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('expires_at', models.DateTimeField()),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'ordering': ['-created_at'],
                'constraints': [models.UniqueConstraint(fields=('digest',), name='profiles_apitoken_digest_unique', violation_error_message='This token exists already.')],
            },
        ),
        migrations.RunPython(hash_plaintext_tokens, migrations.RunPython.noop),
    ]
