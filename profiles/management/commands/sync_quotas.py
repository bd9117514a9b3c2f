"""manage.py sync_quotas: one vGPU ResourceQuota per namespace a policy budget covers (the quotas CronJob)."""

from django.core.management.base import BaseCommand, CommandError

from injector_site.platform.kube import KubeConfigError, kube_api_client, kube_arguments_add, kube_core_api
from profiles.catalog import catalog_build
from profiles.quotas import QUOTA_NAME, QuotaApiError, namespace_quotas_store, quotas_sync

ACTIONS = ("created", "updated", "unchanged", "deleted", "waiting", "failed")


class Command(BaseCommand):
    help = (f"Create, update or delete the ResourceQuota {QUOTA_NAME} in every namespace whose policy states a vGPU "
            "budget, and record each quota's used/hard for the dashboard.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Say what would change; change and record nothing.")
        kube_arguments_add(parser)

    def handle(self, *args, dry_run: bool, kubeconfig: str | None, context: str | None, **options):
        from urllib3.exceptions import HTTPError

        try:
            api_client = kube_api_client(kubeconfig=kubeconfig, context=context)
        except KubeConfigError as exc:
            raise CommandError(str(exc)) from exc
        host = api_client.configuration.host
        policies = catalog_build().policies  # read now, not a cached copy: the run is minutes apart
        try:
            with api_client:
                outcomes = quotas_sync(api=kube_core_api(api_client), policies=policies, dry_run=dry_run)
        except QuotaApiError as exc:
            raise CommandError(f"{exc} (API server {host})") from exc
        except HTTPError as exc:
            raise CommandError(f"cannot reach the API server at {host}: {exc}") from exc
        prefix = "would be " if dry_run else ""
        for outcome in outcomes:
            hard = ", ".join(f"{k}={v}" for k, v in sorted(outcome.hard.items()))
            line = f"{outcome.namespace}: {prefix}{outcome.action}" + (f" ({hard})" if hard else "")
            self.stdout.write(line + (f": {outcome.message}" if outcome.message else ""))
        if not dry_run:
            namespace_quotas_store(outcomes=outcomes)
        counts = {action: sum(o.action == action for o in outcomes) for action in ACTIONS}
        self.stdout.write(", ".join(f"{n} {action}" for action, n in counts.items()))
        failed = [o.namespace for o in outcomes if o.action == "failed"]
        if failed:
            raise CommandError(f"{len(failed)} namespace(s) failed: {', '.join(failed)} (see the lines above)")
