from django.apps import AppConfig


class ProfilesConfig(AppConfig):
    name = "profiles"
    verbose_name = "GPU profiles"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (registers the change-logged models)
        from .changes.commands import commands_change_context_install

        commands_change_context_install()
