"""manage.py export_configuration --output volcano-config.yaml: the configuration in force, for check_pods."""

from __future__ import annotations

import sys

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mutations.engine.configuration import catalog_document
from profiles.catalog import catalog_build


class Command(BaseCommand):
    help = "Write the configuration in force (presets, GPU models, namespace policies, model catalog) as YAML."

    def add_arguments(self, parser):
        parser.add_argument("--output", "-o", required=True, help="File to write, or - for standard output.")

    def handle(self, *args, output: str, **options):
        catalog = catalog_build()  # read now, not the cached copy: the file says exactly what is configured
        header = (f"# volcano-injector configuration version {catalog.version}, exported "
                  f"{timezone.now():%Y-%m-%dT%H:%M:%SZ} by manage.py export_configuration.\n"
                  f"# Read by: manage.py check_pods FILE... --configuration THIS_FILE\n")
        text = header + yaml.safe_dump(catalog_document(catalog), sort_keys=False, allow_unicode=True)
        if output == "-":
            sys.stdout.write(text)
            return
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror}") from exc
        self.stdout.write(f"wrote configuration version {catalog.version} to {output} "
                          f"({len(catalog.presets)} presets, {len(catalog.policies)} namespace policies)")
