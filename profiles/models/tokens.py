"""API tokens (stored as digests)."""

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A REST API token of a user. Only its SHA-256 is stored: the token is shown once, when it is issued
    (manage.py issue_token), and a database dump or the admin reveals none. Tokens expire."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name="user", on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(verbose_name="SHA-256 digest", max_length=64, help_text="SHA-256 of the token, hex.")
    prefix = models.CharField(
        verbose_name="prefix", max_length=12, help_text="The token's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(verbose_name="created", auto_now_add=True)
    expires_at = models.DateTimeField(verbose_name="expires")
    last_used_at = models.DateTimeField(verbose_name="last used", null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        constraints = [
            # Authentication looks the token up by its digest.
            models.UniqueConstraint(fields=["digest"], name="%(app_label)s_%(class)s_digest_unique",
                                    violation_error_message="This token exists already."),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


# The change log's row: a module of its own (profiles/models_change_log.py), a model of this app.
