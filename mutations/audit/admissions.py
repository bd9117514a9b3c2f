"""Reading audited Pod CREATEs for a replay (mutations.impact): what the engine read of each Pod and what it
decided, with the detail columns as JSON text, however they are stored (mutations.compression).

Equal values have equal text (compact JSON, written one way), so a caller can use the text as a key and
parse each distinct one once.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import BinaryField, Case, Field, QuerySet, TextField, Value, When
from django.db.models.functions import Cast

from ..compression import detail_decompress
from ..models import AdmissionAudit

_CHUNK = 2_000


class AdmissionInputs(NamedTuple):
    """One audited Pod CREATE: what the engine read of it, and what was decided (its name: admission_names)."""

    id: int
    namespace: str
    inputs: str  # JSON text (mutations.engine.inputs.pod_inputs)
    resources_before: str  # JSON text: each container's name, init and resources, in order
    config_version: int
    decision: str
    reason: str
    preset_name: str
    grants: str  # JSON text: the engine's grants (the row's `containers`); "[]" where not read (grants_version)


def _creates_since(since: datetime) -> QuerySet[AdmissionAudit]:
    return AdmissionAudit.objects.filter(created_at__gte=since, operation="CREATE", dry_run=False)


def admission_inputs_count(*, since: datetime, limit: int) -> int:
    """How many rows admission_inputs_since gives."""
    count: int = _creates_since(since)[:limit].count()
    return count


def admission_inputs_since(*, since: datetime, limit: int, grants_version: int | None = None,
                           seconds: dict[str, float] | None = None) -> Iterator[AdmissionInputs]:
    """The Pod CREATEs (not dry runs) audited since `since`, newest first, at most `limit`.

    `grants_version`: read the grants only of the rows decided under that configuration version (a replay
    needs no others: it decides those Pods again); None reads every row's. `seconds`, when given, collects
    the time spent reading rows ("fetch") and decoding columns ("decode").
    """
    # The detail columns are LZ4 on PostgreSQL (CompressedJSONField): read their bytes, which are as equal as
    # the JSON they hold (one dictionary, deterministic compression), and decompress each distinct one once.
    compressed = connection.vendor == "postgresql"
    detail: Field[Any, Any] = BinaryField() if compressed else TextField()
    grants: Any = Cast("containers", detail)
    if grants_version is not None:
        grants = Case(When(config_version=grants_version, then=grants), default=Value(None), output_field=detail)
    query = (_creates_since(since).order_by("-created_at", "-id")
             .values_list("id", "namespace", Cast("inputs", TextField()), Cast("resources_before", detail),
                          "config_version", "decision", "reason", "preset_name", grants)[:limit])
    texts: dict[bytes, str] = {}
    fetch = decode = 0.0
    rows = query.iterator(chunk_size=_CHUNK)
    try:
        while True:
            started = time.perf_counter()
            row = next(rows, None)
            read = time.perf_counter()
            fetch += read - started
            if row is None:
                break
            audit_id, namespace, inputs, resources, version, decision, reason, preset, grants_blob = row
            if compressed:
                resources = _text(texts, resources)
                grants_blob = _text(texts, grants_blob)
                decode += time.perf_counter() - read
            yield AdmissionInputs(audit_id, namespace, inputs or "{}", resources or "[]", version, decision,
                                  reason or "", preset or "", grants_blob or "[]")
    finally:
        if seconds is not None:
            seconds["fetch"] = seconds.get("fetch", 0.0) + fetch
            seconds["decode"] = seconds.get("decode", 0.0) + decode


def admission_names(*, ids: Collection[int]) -> dict[int, str]:
    """The Pod name of each audited admission (its generateName where the name was not set yet), by id."""
    rows = AdmissionAudit.objects.filter(pk__in=list(ids)).values_list("id", "pod_name", "generate_name")
    return {audit_id: pod_name or generate_name or "" for audit_id, pod_name, generate_name in rows}


def _text(texts: dict[bytes, str], blob: bytes | memoryview | None) -> str | None:
    if blob is None:
        return None
    blob = bytes(blob)
    found = texts.get(blob)
    if found is None:
        found = texts[blob] = detail_decompress(blob).decode()
    return found
