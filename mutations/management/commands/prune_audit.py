"""Delete audit rows past retention, in small batches (short transactions, no long locks)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mutations.audit import audit_rows_delete
from mutations.models import AdmissionAudit

UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """'90d', '36h', '2w' (or a bare number of days) as a timedelta."""
    match = re.fullmatch(r"\s*(\d+)\s*([hdw]?)\s*", text or "")
    if not match:
        raise CommandError(f"--older-than {text!r} is not an age: use e.g. 90d, 36h or 2w")
    amount, unit = int(match.group(1)), match.group(2) or "d"
    if amount < 1:
        raise CommandError("--older-than must be at least 1h: pruning everything is not retention")
    return timedelta(**{UNITS[unit]: amount})


class Command(BaseCommand):
    help = "Delete audit rows older than --older-than (default AUDIT_RETENTION_DAYS), in small batches."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", default=None,
                            help="Age such as 90d, 36h or 2w (default: AUDIT_RETENTION_DAYS days).")
        parser.add_argument("--batch-size", type=int, default=5000, help="Rows per DELETE (default 5000).")
        parser.add_argument("--pause-seconds", type=float, default=0.0,
                            help="Sleep between batches, to leave the database room (default 0).")

    def handle(self, *args, older_than: str | None, batch_size: int, pause_seconds: float, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if pause_seconds < 0:
            raise CommandError("--pause-seconds cannot be negative")
        age = parse_age(older_than) if older_than is not None else timedelta(days=settings.AUDIT_RETENTION_DAYS)
        if age <= timedelta(0):
            raise CommandError("AUDIT_RETENTION_DAYS must be at least 1")
        cutoff = timezone.now() - age
        deleted = batches = 0
        while True:
            # Oldest first through the created_at index; each batch is its own short transaction,
            # so the webhook's writers and the dashboard never wait long for a lock.
            ids = list(AdmissionAudit.objects.filter(created_at__lt=cutoff).order_by("created_at", "id")
                       .values_list("id", flat=True)[:batch_size])
            if not ids:
                break
            deleted += audit_rows_delete(ids=ids)  # the overview's rollup loses them in the same transaction
            batches += 1
            if len(ids) < batch_size:
                break
            if pause_seconds:
                time.sleep(pause_seconds)
        self.stdout.write(f"deleted {deleted} audit rows older than {cutoff:%Y-%m-%d %H:%M} UTC in {batches} batches")
