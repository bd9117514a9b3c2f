"""manage.py write_policy_reports: the audit-only rehearsal of each namespace as its PolicyReport (the CronJob of
deploy/components/policy-reports)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from injector_site.platform.kube import KubeConfigError, kube_api_client, kube_arguments_add
from mutations.audit.policy_reports import (
    audit_only_namespaces,
    namespace_policy_report,
    policy_report_error_text,
    policy_report_write,
)
from profiles.catalog import catalog_build


class Command(BaseCommand):
    help = ("Write one PolicyReport (wgpolicyk8s.io/v1alpha2) per audit-only namespace: a fail result per rule "
            "enforce would deny Pods for, from the last 7 days of audit rows.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Print the reports as JSON; write nothing.")
        kube_arguments_add(parser)

    def handle(self, *args, dry_run: bool, kubeconfig: str | None, context: str | None, **options):
        policies = catalog_build().policies  # read now, not a cached copy: runs are minutes apart
        reports = [namespace_policy_report(namespace=ns, policies=policies)
                   for ns in audit_only_namespaces(policies=policies)]
        if dry_run:
            self.stdout.write(json.dumps(reports, indent=2))
            return
        from kubernetes.client import ApiException, CustomObjectsApi
        from urllib3.exceptions import HTTPError

        try:
            api_client = kube_api_client(kubeconfig=kubeconfig, context=context)
        except KubeConfigError as exc:
            raise CommandError(str(exc)) from exc
        failed = []
        with api_client:
            api = CustomObjectsApi(api_client)
            for report in reports:
                namespace = report["metadata"]["namespace"]
                try:
                    action = policy_report_write(api=api, report=report)
                except ApiException as exc:
                    failed.append(namespace)
                    self.stdout.write(f"{namespace}: failed: {policy_report_error_text(exc)}")
                    continue
                except HTTPError as exc:
                    raise CommandError(f"cannot reach the API server at {api_client.configuration.host}: "
                                       f"{exc}") from exc
                self.stdout.write(f"{namespace}: PolicyReport {report['metadata']['name']} {action} "
                                  f"({report['summary']['fail']} rule(s) would deny)")
        self.stdout.write(f"{len(reports) - len(failed)} of {len(reports)} audit-only namespace(s) reported")
        if failed:
            raise CommandError(f"{len(failed)} namespace(s) failed: {', '.join(failed)} (see the lines above)")
