from django.apps import AppConfig


class ProfilesConfig(AppConfig):
    name = "profiles"
    verbose_name = "GPU profiles"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the configuration-version bump)
