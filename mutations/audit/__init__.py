"""The audit store: one row per answered admission, never lost, never duplicated, and the reads of it.

The request path spools each row (writer.audit_record_submit) as a COPY text line (encoding) into a
memory-mapped segment (spool); a thread per process COPYs the segments into PostgreSQL (inserters,
writer). rollup keeps the overview's hourly counts; selectors and filters read rows for the
dashboard and the API. Design and costs: docs/audit-write-path.md, docs/audit-rollup.md.
"""

from .rollup import audit_rollup_mark, audit_rollup_refresh, audit_rollup_reset, audit_rows_delete
from .writer import (
    audit_backlog_rows,
    audit_flush,
    audit_record_submit,
    audit_writer_start,
    audit_writer_stop,
)

__all__ = [
    "audit_backlog_rows", "audit_flush", "audit_record_submit", "audit_rollup_mark", "audit_rollup_refresh",
    "audit_rollup_reset", "audit_rows_delete", "audit_writer_start", "audit_writer_stop",
]
