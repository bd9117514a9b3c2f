"""The GPU inventory pages: the node pools the cluster has (as the last good sync read them), and each pool's nodes."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Sum
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from profiles.inventory.store import gpu_inventory_status
from profiles.models import GpuModel, GpuNode, GpuNodePool, Preset
from profiles.oversubscription import oversubscription_report

from ..engine import Decision
from ..models import AuditRollup
from .views import page_context

# How far back the pool page counts grants.
GRANTS_WINDOW = timedelta(hours=24)


def _inventory_context(request, **extra) -> dict:
    return page_context(request, inventory=gpu_inventory_status(), **extra)


@require_GET
@staff_member_required  # the cluster's nodes, not the audit: the staff's, like the budgets
def gpu_pools(request):
    """Every node pool: nodes, cards, registered and physical memory; GPU models no node has; unpooled GPU nodes."""
    pools = list(GpuNodePool.objects.select_related("gpu_model").order_by("card_type", "name"))
    checks = oversubscription_report().pools() if pools else {}
    rows = [{"pool": pool, "ratio": checks[pool.name].as_dict() if pool.name in checks else None} for pool in pools]
    unseen = GpuModel.objects.filter(in_cluster=False).order_by("name")
    unpooled = GpuNode.objects.filter(pool__isnull=True).only("name", "card_type", "registered", "problems")
    return render(request, "dashboard/gpu_pools.html", _inventory_context(
        request, pools=rows, unseen=unseen, unpooled=unpooled))


@require_GET
@staff_member_required
def gpu_pool(request, name: str):
    """One pool: what defines it (card, memory, mode, labels, taints) and each of its nodes."""
    pool = GpuNodePool.objects.select_related("gpu_model").filter(name=name).first()
    if pool is None:
        raise Http404(f"no GPU node pool {name!r} in the last good inventory")
    nodes = pool.nodes.order_by("name").only("name", "cards", "healthy_cards", "registered_memory_mib",
                                             "memory_allocatable_mib", "allocatable", "problems")
    ratios = oversubscription_report().pool(pool.name)
    by_node = {n.node: n for n in ratios.nodes}
    rows = [{"node": node, "ratio": by_node.get(node.name)} for node in nodes]
    return render(request, "dashboard/gpu_pool.html", _inventory_context(
        request, pool=pool, nodes=rows, ratio=ratios.as_dict(), cards_total=pool.cards_total,
        grants=_recent_grants(pool)))


def _recent_grants(pool: GpuNodePool) -> dict | None:
    """Admissions of the last 24 hours sized by presets pinned to the pool's GPU model, from the hourly rollup.

    The webhook does not know the node a Pod lands on: Pods sized otherwise may land here too, so this is what
    can be attributed, and the page says so. None when no preset is pinned to the pool's model."""
    if pool.gpu_model_id is None:
        return None
    presets = list(Preset.objects.filter(gpu_model_id=pool.gpu_model_id).values_list("name", flat=True))
    if not presets:
        return None
    since = timezone.now() - GRANTS_WINDOW
    totals = AuditRollup.objects.filter(hour__gte=since, preset_name__in=presets,
                                        decision=Decision.MUTATED.value).aggregate(
        admissions=Sum("admissions"), memory_mib=Sum("vgpu_memory_mib"))
    memory = int(totals["memory_mib"] or 0)
    return {"presets": presets, "admissions": int(totals["admissions"] or 0), "memory_mib": memory,
            "slices": memory / pool.registered_memory_mib}
