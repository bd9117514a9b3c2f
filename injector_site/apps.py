from django.apps import AppConfig


class InjectorSiteConfig(AppConfig):
    name = "injector_site"
    verbose_name = "volcano-injector"

    def ready(self) -> None:
        from .platform import checks  # noqa: F401  (registers the system checks)
