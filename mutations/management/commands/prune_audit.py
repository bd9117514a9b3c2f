"""Remove audit rows past retention by dropping whole days (partitions): the same time at any table size."""

from __future__ import annotations

import re
import time
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mutations.audit import audit_compact, audit_prune
from mutations.audit.rollup import COMPACT_DAYS_PER_RUN

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
    help = ("Drop the audit rows of every UTC day that ended before --older-than (default AUDIT_RETENTION_DAYS), "
            "a whole day partition at a time.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", default=None,
                            help="Age such as 90d, 36h or 2w (default: AUDIT_RETENTION_DAYS days).")
        parser.add_argument("--lock-timeout-ms", type=int, default=5000,
                            help="How long dropping one day waits for the audit table's lock (default 5000).")
        parser.add_argument("--compact-days", type=int, default=COMPACT_DAYS_PER_RUN,
                            help="Then rebuild the indexes of at most this many days that have ended since the "
                                 f"last run, packed (default {COMPACT_DAYS_PER_RUN}; 0: none). Reads and writes go on.")

    def handle(self, *args, older_than: str | None, lock_timeout_ms: int, compact_days: int, **options):
        if lock_timeout_ms < 1:
            raise CommandError("--lock-timeout-ms must be at least 1")
        if compact_days < 0:
            raise CommandError("--compact-days must be 0 or more")
        age = parse_age(older_than) if older_than is not None else timedelta(days=settings.AUDIT_RETENTION_DAYS)
        if age <= timedelta(0):
            raise CommandError("AUDIT_RETENTION_DAYS must be at least 1")
        cutoff = timezone.now() - age
        started = time.monotonic()
        # Whole days only: the rows of the cutoff's own day stay until that day has ended (at most a day
        # longer than the age), and each day goes in one short transaction whatever its size.
        rows, days = audit_prune(cutoff=cutoff, lock_timeout_ms=lock_timeout_ms)
        self.stdout.write(f"deleted {rows} audit rows older than {cutoff:%Y-%m-%d %H:%M} UTC (the days before "
                          f"{cutoff:%Y-%m-%d}): {days} day partitions dropped in {time.monotonic() - started:.2f} s")
        started = time.monotonic()
        compacted = audit_compact(days=compact_days)
        if compacted:
            self.stdout.write(f"rebuilt the indexes of {len(compacted)} ended day(s), packed: "
                              f"{', '.join(f'{d:%Y-%m-%d}' for d in compacted)} in {time.monotonic() - started:.1f} s")
