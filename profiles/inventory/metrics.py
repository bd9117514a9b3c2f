"""The GPU inventory's state as metrics, read from the database (the CronJob writes it, not these processes)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..models import GpuInventorySync, GpuNodePool


class GpuInventoryCollector(Collector):
    """The latest sync and the last good one, read at most every `cache_seconds` per process.

    Exported by every replica alike (rules and panels take the max over them). Nothing before the first
    run, or while the database cannot be read.
    """

    def __init__(self, cache_seconds: float = 10.0) -> None:
        self._cache_seconds = cache_seconds
        self._read_at = float("-inf")
        self._state: tuple[GpuInventorySync | None, GpuInventorySync | None, list[tuple[str, int, int]]] | None = None

    def forget(self) -> None:
        """Read the database at the next collection (tests)."""
        self._read_at = float("-inf")

    def _read(self) -> None:
        runs = GpuInventorySync.objects.order_by("-finished_at", "-id")
        latest = runs.first()
        good = latest if latest is not None and latest.succeeded else runs.filter(succeeded=True).first()
        pools = [(p.card_type, p.node_count, p.cards_per_node) for p in GpuNodePool.objects.only(
            "card_type", "node_count", "cards_per_node")]
        self._state = (latest, good, pools)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        if now - self._read_at >= self._cache_seconds:
            try:
                self._read()
                self._read_at = now
            except DatabaseError:
                self._state, self._read_at = None, float("-inf")
        if self._state is None:
            return
        latest, good, pools = self._state
        if latest is None:
            return
        yield GaugeMetricFamily(
            "volcano_injector_gpu_inventory_last_run_failed",
            "1 when the last GPU inventory sync (manage.py sync_gpu_inventory) failed or read only part of the "
            "cluster, so the last good inventory stays in use; else 0.",
            value=0 if latest.succeeded else 1,
        )
        if good is None:
            return
        yield GaugeMetricFamily(
            "volcano_injector_gpu_inventory_last_success_timestamp_seconds",
            "When the last successful GPU inventory sync finished (Unix time).",
            value=good.finished_at.timestamp(),
        )
        yield GaugeMetricFamily(
            "volcano_injector_gpu_inventory_sync_duration_seconds",
            "How long the last successful GPU inventory sync took, listing and storing (seconds).",
            value=good.duration_seconds,
        )
        cards: dict[str, int] = {}
        nodes: dict[str, int] = {}
        for card_type, node_count, per_node in pools:
            nodes[card_type] = nodes.get(card_type, 0) + node_count
            cards[card_type] = cards.get(card_type, 0) + node_count * per_node
        node_family = GaugeMetricFamily(
            "volcano_injector_gpu_inventory_nodes",
            "GPU nodes with a vGPU registration in the last good inventory, by card type.", labels=["card_type"])
        card_family = GaugeMetricFamily(
            "volcano_injector_gpu_inventory_cards",
            "Physical GPU cards in the last good inventory, by card type.", labels=["card_type"])
        for card_type in sorted(nodes):
            node_family.add_metric([card_type], nodes[card_type])
            card_family.add_metric([card_type], cards[card_type])
        yield node_family
        yield card_family
