"""/mutate's decisions remembered per Pod template: the replicas of a Deployment, a Job or a StatefulSet arrive alike.

Deciding a Pod (the engine, then the patch) was about two fifths of an admission's instructions
(docs/benchmarks.md, "Instructions per admission"), and a cluster's Pods come mostly from controllers whose
replicas are alike to the engine but for their names, uids and times. `decision_remembered` keeps the
preview and the answer of each Pod by `engine.replica_key` (the Pod without what replicas differ in and the
engine never reads) and its namespace, for the Catalog in force: a new Catalog (a configuration change, a
new GPU inventory) starts an empty table, so a decision is never served under a configuration it was not
made under. A Pod whose decision reads anything else (a serving group worker's leader grant, which
groups.py finds in this process, the audit store or the Kubernetes API) is not remembered: the caller
decides it afresh. Bounded: at most DECISION_MEMO_ENTRIES keys of at most DECISION_MEMO_KEY_MAX_BYTES
each, the table cleared when full.
"""

from __future__ import annotations

from typing import NamedTuple

from profiles.catalog import catalog_current

from ..engine import Catalog, JsonObject
from ..engine.replicas import replica_key
from .decide import AdmissionAnswer, Preview, admission_answer, pod_preview

DECISION_MEMO_ENTRIES = 256
DECISION_MEMO_KEY_MAX_BYTES = 32 * 1024  # a Pod with its managedFields: a few KiB to a few tens


class Decided(NamedTuple):
    """A Pod's preview (for the audit row, the metrics and the log) and the answer /mutate gives.

    Remembered, they are the template's first Pod's: `preview.result.pod` is that Pod converted (under its
    name). /mutate sends `answer.patch`, and reads of that Pod only the annotations the engine wrote
    (services.group_leader_remember), which every Pod of the key gets alike; nothing is edited after it is made.
    """

    preview: Preview
    answer: AdmissionAnswer


# (the Catalog the table's decisions were made under, the table). Replaced whole, never edited across
# Catalogs: a thread still deciding under the previous Catalog writes into the previous table.
_table: tuple[Catalog | None, dict[tuple[str, bytes], Decided]] = (None, {})


def decision_remembered(*, pod: JsonObject, namespace: str) -> Decided:
    """The preview and answer for a Pod that needs nothing but the Catalog: remembered, or decided and kept."""
    global _table
    catalog = catalog_current()
    key = replica_key(pod)
    if key is None or len(key) > DECISION_MEMO_KEY_MAX_BYTES:
        return _decided(pod, namespace, catalog)
    table_catalog, table = _table
    if table_catalog is not catalog:
        table = {}
        _table = (catalog, table)
    found = table.get((namespace, key))
    if found is None:
        found = _decided(pod, namespace, catalog)
        if len(table) >= DECISION_MEMO_ENTRIES:
            table.clear()
        table[(namespace, key)] = found
    return found


def _decided(pod: JsonObject, namespace: str, catalog: Catalog) -> Decided:
    preview = pod_preview(pod=pod, namespace=namespace, catalog=catalog)
    return Decided(preview, admission_answer(preview))


def decision_memo_clear() -> None:
    """Forget every remembered decision (tests)."""
    global _table
    _table = (None, {})
