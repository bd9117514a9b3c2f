"""Writing audit rows: one per answered admission, never lost, never duplicated."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from .metrics import AUDIT_ROWS_WRITTEN, AUDIT_WRITE_FAILURES
from .models import AdmissionAudit

logger = logging.getLogger("volcano_injector.audit")


def audit_record_submit(*, record: dict) -> None:
    """Hand one audit row (a dict of AdmissionAudit fields) to the writer."""
    try:
        AdmissionAudit.objects.bulk_create([AdmissionAudit(**record)], ignore_conflicts=True)
        AUDIT_ROWS_WRITTEN.inc()
    except DatabaseError:
        AUDIT_WRITE_FAILURES.inc()
        logger.exception("audit row could not be written", extra={"request_uid": record.get("request_uid")})
