"""The cluster's GPU nodes as the last good `manage.py sync_gpu_inventory` read them: node pools, nodes, runs.

Written only by the sync (profiles.inventory.store), read by the Catalog (the engine's shape checks), the
admin, the API and the dashboard. A failed or partial run changes none of them: it adds a failed run row.
"""

from django.db import models
from django.db.models import Q


class GpuNodePool(models.Model):
    """GPU nodes alike for Volcano's scheduler: the same card, card count, memory, mode, labels and taints."""

    name = models.CharField(max_length=160, unique=True, help_text="The card type and count, and a digest of the rest.")
    card_type = models.CharField(max_length=128, help_text="As the device plugin registered it, e.g. NVIDIA-L4.")
    gpu_model = models.ForeignKey("profiles.GpuModel", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="node_pools")
    cards_per_node = models.PositiveIntegerField()
    registered_memory_mib = models.PositiveIntegerField(
        help_text="Memory of one card as registered (the slices Volcano places are checked against it).")
    physical_memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="The card's own memory (GFD's nvidia.com/gpu.memory, else registered over "
                                         "the scaling); below the registered memory when oversubscribed.")
    memory_scaling = models.FloatField(default=1.0, help_text="devicememoryscaling of the device plugin's ConfigMap.")
    split_count = models.PositiveIntegerField(default=10, help_text="vGPUs one card holds (devicesplitcount).")
    mode = models.CharField(max_length=16, default="hami-core")
    node_count = models.PositiveIntegerField()
    labels = models.JSONField(default=dict, help_text="Labels every node of the pool carries.")
    varying_labels = models.JSONField(default=dict, help_text="Labels that differ from node to node: key -> values.")
    taints = models.JSONField(default=list, help_text="[key, value, effect] of the NoSchedule/NoExecute taints.")
    first_seen_at = models.DateTimeField()
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["card_type", "name"]
        verbose_name = "GPU node pool"
        constraints = [
            models.CheckConstraint(
                condition=Q(registered_memory_mib__gt=0) & Q(cards_per_node__gt=0),
                name="%(app_label)s_%(class)s_has_cards",
                violation_error_message="A node pool has at least one card with memory.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def oversubscribed(self) -> bool:
        return self.physical_memory_mib is not None and self.registered_memory_mib > self.physical_memory_mib

    @property
    def cards_total(self) -> int:
        return self.node_count * self.cards_per_node

    @property
    def slices_total(self) -> int:
        """vGPUs its cards hold together (devicesplitcount each)."""
        return self.cards_total * self.split_count


class GpuNode(models.Model):
    """One GPU node as the last good sync read it (a node with no vGPU registration has no pool)."""

    name = models.CharField(max_length=253, unique=True)
    # The dashboard's pool page lists its nodes by pool.
    pool = models.ForeignKey(GpuNodePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes")
    card_type = models.CharField(max_length=128, blank=True)
    cards = models.PositiveIntegerField(default=0)
    healthy_cards = models.PositiveIntegerField(default=0)
    registered_memory_mib = models.PositiveIntegerField(default=0)
    physical_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_scaling = models.FloatField(default=1.0)
    split_count = models.PositiveIntegerField(default=10)
    mode = models.CharField(max_length=16, default="hami-core")
    registered = models.BooleanField(default=True, help_text="It carries the device plugin's volcano.sh/"
                                                             "node-vgpu-register annotation.")
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    allocatable = models.JSONField(default=dict, help_text="Its allocatable volcano.sh/vgpu-* (and nvidia.com/gpu).")
    memory_allocatable_mib = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Its allocatable host memory (status.allocatable.memory) in MiB: what vGPU "
                                         "memory granted beyond the cards' own is backed by when oversubscribed.")
    card_uuids = models.JSONField(default=list)
    problems = models.JSONField(default=list, help_text="What of its registration could not be read.")
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU node"

    def __str__(self) -> str:
        return self.name


class GpuInventorySync(models.Model):
    """One run of `manage.py sync_gpu_inventory`: what it read, or why it kept the last good inventory."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    succeeded = models.BooleanField()
    changed = models.BooleanField(default=False, help_text="The pools the engine checks against changed.")
    error = models.TextField(blank=True)
    nodes_listed = models.PositiveIntegerField(default=0)
    gpu_nodes = models.PositiveIntegerField(default=0)
    pools = models.PositiveIntegerField(default=0)
    pages = models.PositiveIntegerField(default=0)
    problems = models.JSONField(default=list, help_text="What could not be read (run-wide, then node by node).")
    duration_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-finished_at", "-id"]
        verbose_name = "GPU inventory sync"
        indexes = [
            # The latest run (the banner, the metrics) and the latest good one.
            models.Index(fields=["-finished_at"], name="profiles_inventory_sync_recent"),
        ]

    def __str__(self) -> str:
        return f"{'ok' if self.succeeded else 'failed'} {self.finished_at:%Y-%m-%d %H:%M:%S}"
