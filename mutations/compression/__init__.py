"""The audit row's detail columns, compressed: JSON as an LZ4 block with the engine's vocabulary as dictionary.

A column is compressed by declaring it a `CompressedJSONField` on AdmissionAudit: that declaration is
the one place that says what is compressed. The COPY encoding (mutations/audit/encoding.py), the
ORM and every reader follow from it, so a column added later (issue 15's engine inputs, say) costs
one line. Why and what it saves: docs/audit-rollup.md, "Bytes per row".

Stored form (PostgreSQL `bytea`): one byte naming the dictionary, then an LZ4 block (with its
uncompressed size) of the compact JSON text. A new dictionary gets a new number; old rows keep
theirs and stay readable. On SQLite (development) the columns are plain JSON text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lz4.block
import orjson
from django.db import models

# Dictionary number -> its bytes. The JSON fragments the engine's patches, container grants, the Pod's
# resources and warnings are made of (annotation keys, resource paths, field names, phrases): a
# value of a few hundred bytes then compresses to its few varying parts.
DICTIONARIES = {1: Path(__file__).with_name("detail-dictionary-v1.txt").read_bytes()}
DICTIONARY = 1  # the one new values use


def _json_default(value: object) -> object:
    return list(value) if isinstance(value, (set, frozenset, tuple)) else str(value)


def json_bytes(value: Any) -> bytes:
    """Compact JSON of a detail value (orjson; the standard library for what orjson refuses), without NUL."""
    try:
        data = orjson.dumps(value, default=_json_default)
    except TypeError:  # lone surrogates, non-string keys
        data = json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "replace")
    return data.replace(b"\\u0000", b"")


def detail_compress(data: bytes) -> bytes:
    return bytes((DICTIONARY,)) + lz4.block.compress(data, dict=DICTIONARIES[DICTIONARY], store_size=True)


def detail_decompress(blob: bytes) -> bytes:
    version = blob[0]
    if version not in DICTIONARIES:
        raise ValueError(f"audit detail compressed with dictionary {version}, which this version does not have")
    return lz4.block.decompress(blob[1:], dict=DICTIONARIES[version])


class CompressedJSONField(models.JSONField):
    """JSON written once and shown whole, stored compressed (`bytea` on PostgreSQL, JSON text elsewhere).

    No lookups inside it (nothing queries these columns); the value reads back as the same Python object.
    """

    def db_type(self, connection):
        if connection.vendor == "postgresql":
            return "bytea"
        return super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        if connection.vendor == "postgresql" and not hasattr(value, "resolve_expression"):
            return None if value is None else detail_compress(json_bytes(value))
        return super().get_db_prep_value(value, connection, prepared)

    def from_db_value(self, value, expression, connection):
        if isinstance(value, (bytes, memoryview)):
            return json.loads(detail_decompress(bytes(value)))
        if value is None or isinstance(value, str):
            return super().from_db_value(value, expression, connection)
        return value
