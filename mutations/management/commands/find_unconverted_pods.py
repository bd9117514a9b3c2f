"""List GPU Pods that bypassed the webhook (still asking for nvidia.com/gpu where it converts), and record them."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from injector_site.platform.kube import (
    KubeConfigError,
    kube_admission_api,
    kube_api_client,
    kube_arguments_add,
    kube_core_api,
)
from mutations.audit.unconverted import PODS_KEPT, unconverted_pods_find, unconverted_scan_record
from mutations.engine import Mode
from profiles.catalog import catalog_current, policy_for_namespace


class Command(BaseCommand):
    help = ("List live Pods still asking for nvidia.com/gpu in namespaces the webhook converts (they bypassed it, "
            "e.g. while it was down with failurePolicy Ignore); record the result for /metrics and the dashboard.")

    def add_arguments(self, parser):
        parser.add_argument("--webhook-configuration", default="volcano-injector",
                            help="The MutatingWebhookConfiguration whose selectors say which Pods the webhook "
                                 "sees (default volcano-injector).")
        kube_arguments_add(parser)
        parser.add_argument("--no-record", action="store_true",
                            help="Only print what is found; keep the recorded result (metrics, dashboard) as it is.")

    def handle(self, *args, webhook_configuration: str, kubeconfig: str | None, context: str | None,
               no_record: bool, **options):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        catalog = catalog_current()

        def covered(namespace: str) -> bool:
            # enforce only: an audit-only namespace's Pods were seen and recorded, and left unchanged on purpose.
            return policy_for_namespace(namespace=namespace, catalog=catalog).mode is Mode.ENFORCE

        try:
            api_client = kube_api_client(kubeconfig=kubeconfig, context=context)
            with api_client:
                result = unconverted_pods_find(core_api=kube_core_api(api_client),
                                               admission_api=kube_admission_api(api_client),
                                               webhook_configuration=webhook_configuration, covered=covered)
        except (KubeConfigError, ApiException, HTTPError) as exc:
            message = self._failure(exc, webhook_configuration)
            if not no_record:
                unconverted_scan_record(result=None, error=message)
            raise CommandError(message) from exc
        for pod in result.unconverted:
            owner = f" (owner {pod['owner']})" if pod["owner"] else ""
            self.stdout.write(f"{pod['namespace']}/{pod['name']}: {pod['phase'] or 'unknown phase'}, "
                              f"created {pod['created']}{owner}")
        if not no_record:
            unconverted_scan_record(result=result)
        namespaces = ", ".join(f"{ns} {count}" for ns, count in sorted(result.by_namespace.items()))
        self.stdout.write(
            f"{len(result.unconverted)} unconverted GPU Pod(s) among {result.pods_examined} live Pods"
            + (f" ({namespaces})" if namespaces else "")
            + ("" if no_record else "; recorded")
            + (f"; the dashboard lists the first {PODS_KEPT}" if len(result.unconverted) > PODS_KEPT else "")
        )

    @staticmethod
    def _failure(exc: Exception, webhook_configuration: str) -> str:
        from kubernetes.client.exceptions import ApiException

        if isinstance(exc, ApiException):
            if exc.status == 404 and exc.body and "mutatingwebhookconfigurations" in str(exc.body):
                return (f"MutatingWebhookConfiguration {webhook_configuration!r} not found: no Pod is sent to the "
                        "webhook at all (reinstall deploy/), or name yours with --webhook-configuration")
            if exc.status in (401, 403):
                return (f"the Kubernetes API refused the scan ({exc.status} {exc.reason}): it needs list on pods "
                        "and namespaces and get on mutatingwebhookconfigurations (deploy/components/unconverted-pods "
                        f"grants them); the API said: {_api_message(exc)}")
            return f"the Kubernetes API answered {exc.status} {exc.reason}: {_api_message(exc)}"
        return f"cannot reach the Kubernetes API: {exc}"


def _api_message(exc) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message") or exc.body)
    except (TypeError, ValueError):
        return str(exc.body)
