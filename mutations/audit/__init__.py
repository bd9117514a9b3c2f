"""The audit store: one row per answered admission, never lost, never duplicated, and the reads of it.

The request path spools each row (writer.audit_record_submit) as a COPY text line (encoding) into a
memory-mapped segment (spool); a thread per process COPYs the segments into PostgreSQL (inserters,
writer). partitions keeps the table's day partitions; rollup rebuilds the overview's counts (kept by
the table's triggers) and prunes whole days; selectors and filters read rows for the dashboard and
the API. Design and costs: docs/audit-write-path.md, docs/audit-rollup.md.
"""

from .rollup import audit_compact, audit_prune, audit_rollup_rebuild
from .writer import (
    audit_backlog_rows,
    audit_flush,
    audit_record_submit,
    audit_writer_start,
    audit_writer_stop,
)

__all__ = [
    "audit_backlog_rows", "audit_compact", "audit_flush", "audit_prune", "audit_record_submit", "audit_rollup_rebuild",
    "audit_writer_start", "audit_writer_stop",
]
