from django.apps import AppConfig


class MutationsConfig(AppConfig):
    name = "mutations"
    verbose_name = "Admissions"
