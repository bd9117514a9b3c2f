"""Recompute the right-sizing recommendations from Prometheus and print them (run it from a CronJob)."""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mutations.rightsizing import recommendations_refresh
from mutations.rightsizing.automatic import policies_right_size
from mutations.rightsizing.services import thresholds_from_settings


class Command(BaseCommand):
    help = ("Read the use of the Pods each preset, catalog model and policy default sized from Prometheus "
            "(PROMETHEUS_URL), store a recommended size for each, and print them.")

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=None,
                            help="The window read, in days (default RIGHT_SIZING_DAYS, 7).")
        parser.add_argument("--headroom-percent", type=float, default=None,
                            help="Room over the high percentile (default RIGHT_SIZING_HEADROOM_PERCENT, 15).")

    def handle(self, *args, days=None, headroom_percent=None, **options):
        days = settings.RIGHT_SIZING_DAYS if days is None else days
        if not 1 <= days <= 90:
            raise CommandError(f"--days {days}: use 1 to 90 (Prometheus' retention bounds what can be read)")
        thresholds = thresholds_from_settings()
        if headroom_percent is not None:
            if not 0 <= headroom_percent <= 200:
                raise CommandError(f"--headroom-percent {headroom_percent:g}: use 0 to 200")
            thresholds = dataclasses.replace(thresholds, headroom_percent=headroom_percent)
        rows = recommendations_refresh(days=days, thresholds=thresholds)
        if not rows:
            self.stdout.write(f"no converted Pods in the last {days} days: nothing to recommend")
        for row in rows:
            subject = f"{row.kind} {row.name}" + (f" ({row.namespace})" if row.namespace else "") + (
                f" at {row.context_tokens:,} KV tokens" if row.context_tokens else "")
            if row.state == "ok" and row.recommended_mib:
                line = (f"{subject}: {row.current_mib:,} MiB -> {row.recommended_mib:,} MiB ({row.direction}, "
                        f"{row.basis}, confidence {row.confidence}; {row.pods} Pods, {row.hours} h)")
                if row.max_model_len:
                    line += f"; or --max-model-len {row.max_model_len}"
            else:
                line = f"{subject}: {row.state}: {row.message}"
            self.stdout.write(line)
            for fit in (row.evidence or {}).get("oversubscription", []):
                self.stdout.write(fit_line(fit))
        for line in policies_right_size(recommendations=rows, step_percent=settings.RIGHT_SIZING_STEP_PERCENT,
                                        now=timezone.now()):
            self.stdout.write(line)
        if any(row.state == "prometheus-unavailable" for row in rows):
            raise CommandError("Prometheus could not be read: the recommendations shown are the last ones computed")


def fit_line(fit: dict) -> str:
    """One pool of a recommendation: Pods a card at the ratio, what does not agree, where host memory is at risk."""
    line = (f"  on {fit['pool']}: {fit['pods_per_card']} Pods a card at {fit['size_mib']:,} MiB "
            f"({fit['more_per_card']:+d}, {fit['more_in_pool']:+d} in the pool) at ratio {fit['ratio_used']:g}")
    if fit["ratio_problems"]:
        line += f"; ratio {fit['ratio_state']}: {fit['ratio_problems'][0]}"
    if fit["host_memory_risk"]:
        line += f"; host-memory risk: {fit['host_memory_risk'][0]}"
    return line
