"""The configuration change log's row (profiles.changes writes it). A model of the profiles app, in a module of
its own; profiles.models imports it, so `from profiles.models import ObjectChange` works as for every model."""

from django.conf import settings
from django.db import models


class ObjectChange(models.Model):
    """One create, update or delete of a configuration object, with its whole state before and after.

    Written by profiles.changes in the transaction of the change itself, so a rolled-back change leaves
    no row; append-only (read-only in the admin and the API). The id is the configuration version the
    change produced (profiles.changes.recorder): audit rows record it, and the state of any object at
    any version is the postchange_data of its last change at or below that id. Strings are copied
    (user name, object name) so rows outlive users and objects. As NetBox's ObjectChange.
    """

    class Action(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        DELETE = "delete"

    class Through(models.TextChoices):
        ADMIN = "admin"
        API = "api"
        COMMAND = "command"
        SHELL = "shell"
        SYSTEM = "system"

    time = models.DateTimeField(verbose_name="time")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name="user", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    user_name = models.CharField(
        verbose_name="user name", max_length=150, help_text="The user (or the API token's user), or system.")
    through = models.CharField(verbose_name="made through", max_length=16, choices=Through.choices)
    request_id = models.CharField(verbose_name="request id", max_length=64, blank=True,
                                  help_text="The HTTP request (X-Request-Id) or command run that made the change.")
    action = models.CharField(verbose_name="action", max_length=16, choices=Action.choices)
    object_type = models.CharField(
        verbose_name="object type", max_length=64, help_text="The model, e.g. preset, gpumodel, namespacepolicy.")
    object_id = models.BigIntegerField(verbose_name="object id")
    object_repr = models.CharField(
        verbose_name="object", max_length=253, help_text="The object's name (a policy's namespace) after the "
                                                             "change, before it for a delete.")
    reason = models.TextField(verbose_name="reason", blank=True, default="",
                              help_text="Why the change was made, as its author gave it (a restore from the admin "
                                        "needs one; the admin's and the API's other changes may give one).")
    prechange_data = models.JSONField(verbose_name="before", null=True, blank=True)
    postchange_data = models.JSONField(verbose_name="after", null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = "configuration change"
        indexes = [
            # An object's history: WHERE object_type = ? AND object_id = ? ORDER BY id DESC.
            models.Index(fields=["object_type", "object_id", "-id"], name="objectchange_object"),
            # An object by name at a configuration version (an audit row's preset and policy):
            # WHERE object_type = ? AND object_repr = ? AND id <= ? ORDER BY id DESC LIMIT 1.
            models.Index(fields=["object_type", "object_repr", "-id"], name="objectchange_name"),
            # The Changes page and API filtered by user: WHERE user_name = ? ORDER BY id DESC.
            models.Index(fields=["user_name", "-id"], name="objectchange_user"),
            # Filtered by time: WHERE time >= ? AND time < ? ORDER BY id DESC.
            models.Index(fields=["time"], name="objectchange_time"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type} {self.object_repr} by {self.user_name} ({self.time:%Y-%m-%d %H:%M})"
