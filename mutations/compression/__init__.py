"""The audit row's detail columns, compressed: JSON as an LZ4 block with the engine's vocabulary as dictionary.

A column is compressed by declaring it a `CompressedJSONField` on AdmissionAudit: that declaration is
the one place that says what is compressed. The COPY encoding (mutations/audit/encoding.py), the
ORM and every reader follow from it, so a column added later (the engine's inputs, say) costs
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

# Dictionary number -> its bytes. 1: the JSON fragments the engine's patches, container grants, the Pod's
# resources and warnings are made of (annotation keys, resource paths, field names, phrases): a value of a
# few hundred bytes then compresses to its few varying parts. 2: the words of a denial's explanation (rule
# texts, message templates, its JSON keys), read from the engine's source by build_explanation_dictionary.
# 0 is no dictionary and no compression: the JSON text itself (a column's rows from before it was compressed).
RAW = 0
DICTIONARIES = {
    1: Path(__file__).with_name("detail-dictionary-v1.txt").read_bytes(),
    2: Path(__file__).with_name("explanation-dictionary-v2.txt").read_bytes(),
}
DICTIONARY = 1  # the one new values use, unless their column names another


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


# Compressing is mostly fixed cost: python-lz4 sets up its state and loads the dictionary on every call,
# about 75,000 instructions however short the value (callgrind), most of an audit row's encoding. The
# replicas of a Deployment send the same containers, patch, resources and warnings: a value seen lately
# is compressed once per process. Bounded (values up to MEMO_MAX_BYTES, MEMO_ENTRIES of them), cleared
# when full; the output is the same either way.
MEMO_ENTRIES = 2048
MEMO_MAX_BYTES = 4096
_MEMO: dict[tuple[int, bytes], bytes] = {}


def detail_compress(data: bytes, dictionary: int = DICTIONARY) -> bytes:
    key = (dictionary, data)
    found = _MEMO.get(key)
    if found is None:
        found = bytes((dictionary,)) + lz4.block.compress(data, dict=DICTIONARIES[dictionary], store_size=True)
        if len(data) <= MEMO_MAX_BYTES:
            if len(_MEMO) >= MEMO_ENTRIES:
                _MEMO.clear()
            _MEMO[key] = found
    return found


def detail_decompress(blob: bytes) -> bytes:
    version = blob[0]
    if version == RAW:
        return blob[1:]
    if version not in DICTIONARIES:
        raise ValueError(f"audit detail compressed with dictionary {version}, which this version does not have")
    return lz4.block.decompress(blob[1:], dict=DICTIONARIES[version])


class CompressedJSONField(models.JSONField):
    """JSON written once and shown whole, stored compressed (`bytea` on PostgreSQL, JSON text elsewhere).

    No lookups inside it (nothing queries these columns); the value reads back as the same Python object.
    `dictionary`: the DICTIONARIES entry its new values are compressed with.
    """

    def __init__(self, *args, dictionary: int = DICTIONARY, **kwargs):
        if dictionary not in DICTIONARIES:
            raise ValueError(f"no compression dictionary {dictionary}")
        self.dictionary = dictionary
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        if self.dictionary != DICTIONARY:
            kwargs["dictionary"] = self.dictionary
        return name, path, args, kwargs

    def db_type(self, connection):
        if connection.vendor == "postgresql":
            return "bytea"
        return super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        if connection.vendor == "postgresql" and not hasattr(value, "resolve_expression"):
            return None if value is None else detail_compress(json_bytes(value), self.dictionary)
        return super().get_db_prep_value(value, connection, prepared)

    def from_db_value(self, value, expression, connection):
        if isinstance(value, (bytes, memoryview)):
            return json.loads(detail_decompress(bytes(value)))
        if value is None or isinstance(value, str):
            return super().from_db_value(value, expression, connection)
        return value
