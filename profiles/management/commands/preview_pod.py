"""manage.py preview_pod pod.yaml --namespace team-a: what /mutate would do with a Pod, as a diff."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from mutations.webhook.decide import pod_preview, preview_answer
from profiles.selectors import pod_yaml_diff
from profiles.services import PodDocumentError, pod_document_parse


class Command(BaseCommand):
    help = "Show what the webhook would do with a Pod manifest (YAML or JSON) in a namespace; audits nothing."

    def add_arguments(self, parser):
        parser.add_argument("path", help="Pod manifest file, or - for standard input.")
        parser.add_argument("--namespace", "-n", required=True, help="Namespace the Pod would be created in.")
        parser.add_argument("--json", action="store_true", help="Print the decision and the JSON patch as JSON.")

    def handle(self, *args, path: str, namespace: str, **options):
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            pod = pod_document_parse(text=text)
        except PodDocumentError as exc:
            raise CommandError(f"{path}: {exc}") from exc
        preview = pod_preview(pod=pod, namespace=namespace)
        result = preview.result
        if options["json"]:
            self.stdout.write(json.dumps(preview_answer(preview), indent=2))
            return
        self.stdout.write(f"decision: {result.decision.value}")
        self.stdout.write(f"reason:   {result.reason}")
        if result.field:
            self.stdout.write(f"field:    {result.field}")
        self.stdout.write(f"policy:   {result.policy}")
        self.stdout.write(f"preset:   {result.preset or '-'}"
                          + (f" (chosen by {result.source})" if result.source else ""))
        self.stdout.write(f"queue:    {result.queue or '-'}")
        self.stdout.write(f"priority: {result.priority_class or '-'}")
        self.stdout.write(f"config:   version {preview.config_version}")
        for warning in result.warnings:
            self.stdout.write(f"warning:  {warning}")
        diff = pod_yaml_diff(before=pod, after=result.pod, before_name=path, after_name=f"{path} (admitted)")
        self.stdout.write("")
        self.stdout.write(diff if diff else "(no changes)", ending="" if diff else "\n")
