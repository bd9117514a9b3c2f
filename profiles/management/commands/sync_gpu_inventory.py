"""manage.py sync_gpu_inventory: read the cluster's GPU nodes into node pools for the shape checks (the CronJob)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from injector_site.platform.kube import (
    REQUEST_TIMEOUT_SECONDS,
    KubeConfigError,
    kube_api_client,
    kube_arguments_add,
    kube_core_api,
)
from profiles.inventory.read import InventoryReadError, cluster_read
from profiles.inventory.store import gpu_inventory_failed, gpu_inventory_latest, gpu_inventory_store

_PROBLEMS_PRINTED = 20


class Command(BaseCommand):
    help = ("Read every GPU node's vGPU registration, labels and taints and the device plugin's node ConfigMap, "
            "and store the node pools admissions are checked against; a failed read keeps the last good ones.")

    def add_arguments(self, parser):
        kube_arguments_add(parser)
        parser.add_argument("--node-config", default=None,
                            help="The device plugin's per-node ConfigMap as NAMESPACE/NAME (default: "
                                 "INJECTOR_GPU_NODE_CONFIG_NAMESPACE/INJECTOR_GPU_NODE_CONFIG_NAME, "
                                 "kube-system/volcano-vgpu-node-config).")
        parser.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT_SECONDS,
                            help="Seconds each API request may take (default %(default)s).")
        parser.add_argument("--dry-run", action="store_true", help="Read and print; store nothing.")

    def handle(self, *args, kubeconfig, context, node_config, timeout, dry_run, **options):
        namespace, name = settings.INJECTOR_GPU_NODE_CONFIG_NAMESPACE, settings.INJECTOR_GPU_NODE_CONFIG_NAME
        if node_config:
            namespace, slash, name = node_config.partition("/")
            if not slash or not namespace or not name:
                raise CommandError(f"--node-config {node_config!r}: write NAMESPACE/NAME, such as "
                                   "kube-system/volcano-vgpu-node-config")
        if timeout <= 0:
            raise CommandError(f"--timeout {timeout}: give a number of seconds above 0")
        started = timezone.now()
        try:
            api_client = kube_api_client(kubeconfig=kubeconfig, context=context)
        except KubeConfigError as exc:
            self._failed(str(exc), started, None, dry_run)
        host = api_client.configuration.host
        try:
            with api_client:
                reading = cluster_read(api=kube_core_api(api_client), node_config_name=name,
                                       node_config_namespace=namespace, timeout_seconds=timeout)
        except InventoryReadError as exc:
            self._failed(f"{exc} (API server {host})", started, None, dry_run)
        nodes_with_problems = [n for n in reading.nodes if n.problems]
        for problem in reading.problems:
            self.stderr.write(f"warning: {problem}")
        for node in nodes_with_problems[:_PROBLEMS_PRINTED]:
            self.stderr.write(f"warning: node {node.name}: {'; '.join(node.problems)}")
        if len(nodes_with_problems) > _PROBLEMS_PRINTED:
            self.stderr.write(f"warning: and {len(nodes_with_problems) - _PROBLEMS_PRINTED} more nodes with problems")
        if dry_run:
            self.stdout.write(f"would store {len(reading.nodes)} GPU node(s) of {reading.nodes_listed} listed")
            return
        sync = gpu_inventory_store(reading=reading, started_at=started)
        for pool in sync_pools_lines():
            self.stdout.write(pool)
        self.stdout.write(f"{sync.gpu_nodes} GPU node(s) of {sync.nodes_listed} listed in {sync.pages} page(s), "
                          f"{sync.pools} pool(s), {len(nodes_with_problems)} node(s) with problems, "
                          f"{'changed' if sync.changed else 'unchanged'}, {sync.duration_seconds:.1f} s")

    def _failed(self, error: str, started, reading, dry_run: bool):
        good = gpu_inventory_latest(succeeded=True)
        kept = (f"the inventory of {good.finished_at:%Y-%m-%d %H:%M:%S} UTC stays in use" if good is not None
                else "no inventory was ever read: admissions are checked against the declared GPU models")
        if not dry_run:
            gpu_inventory_failed(error=error, started_at=started, reading=reading)
        raise CommandError(f"{error}; {kept}")


def sync_pools_lines() -> list[str]:
    from profiles.models import GpuNodePool

    lines = []
    for pool in GpuNodePool.objects.order_by("card_type", "name"):
        memory = f"{pool.registered_memory_mib:,} MiB"
        if pool.oversubscribed:
            memory += f" ({pool.physical_memory_mib:,} MiB physical, scaling {pool.memory_scaling:g})"
        lines.append(f"{pool.name}: {pool.node_count} node(s) x {pool.cards_per_node} {pool.card_type} of {memory}, "
                     f"{pool.mode}")
    return lines
