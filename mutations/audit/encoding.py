"""One audit row as one line of PostgreSQL's COPY text format, and back.

The columns are the AdmissionAudit model's, read once at import. Why COPY text, and what a row
costs: docs/audit-write-path.md.
"""

from __future__ import annotations

import json
import operator
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeAlias

import orjson
from django.db.models import BooleanField, JSONField

from ..compression import (
    MEMO_ENTRIES,
    MEMO_MAX_BYTES,
    CompressedJSONField,
    detail_compress,
    detail_decompress,
    json_bytes,
)
from ..models import AdmissionAudit
from .lines import LineFunction, line_function

HEADER_PREFIX = b"#volcano-injector audit rows v3, PostgreSQL COPY text format, columns: "
# Segments of the version before the compressed explanation: that column holds JSON text there.
HEADER_PREFIX_V2 = b"#volcano-injector audit rows v2, PostgreSQL COPY text format, columns: "
V2_JSON_TEXT = frozenset({"explanation"})
# Segments of versions before the compressed detail columns: their JSON columns hold JSON text, and are
# re-encoded when read (spool.segment_read).
HEADER_PREFIX_V1 = b"#volcano-injector audit rows, PostgreSQL COPY text format, columns: "

# One audit row: AdmissionAudit field names to values (strings, numbers, JSON values).
AuditRecord: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One audit table column and how its values are written."""

    name: str
    # "compressed" (CompressedJSONField: bytea of mutations/compression), "json", "bool", "text" (cut to
    # `limit` characters) or "value" (numbers, timestamps)
    kind: str
    limit: int | None
    default: object
    dictionary: int = 0  # a compressed column's dictionary (mutations.compression.DICTIONARIES)


def _table_columns() -> tuple[Column, ...]:
    columns = []
    for f in AdmissionAudit._meta.concrete_fields:
        if f.primary_key:
            continue
        if isinstance(f, CompressedJSONField):
            kind = "compressed"
        elif isinstance(f, JSONField):
            kind = "json"
        elif isinstance(f, BooleanField):
            kind = "bool"
        elif f.get_internal_type() in ("CharField", "TextField"):
            kind = "text"
        else:
            kind = "value"
        # Django's default for a missing value: the field's own, "" for a text field, else None. A
        # missing created_at thus encodes as NULL, which the NOT NULL column refuses: the row is set
        # aside (quarantined) rather than written with an invented value.
        columns.append(Column(f.column, kind, getattr(f, "max_length", None), f.get_default(),
                              getattr(f, "dictionary", 0)))
    return tuple(columns)


TABLE_COLUMNS = _table_columns()
COLUMNS = tuple(c.name for c in TABLE_COLUMNS)
KINDS = {c.name: c.kind for c in TABLE_COLUMNS}
DICTIONARY_OF = {c.name: c.dictionary for c in TABLE_COLUMNS if c.kind == "compressed"}
TABLE = AdmissionAudit._meta.db_table


def header_line(columns: tuple[str, ...]) -> bytes:
    return HEADER_PREFIX + ",".join(columns).encode() + b"\n"


HEADER = header_line(COLUMNS)

# COPY text format: backslash, tab, newline and carriage return are escaped; NUL cannot be stored in
# PostgreSQL text at all and is dropped.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r\x00]")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\x00": ""})
_COPY_UNESCAPE = re.compile(r"\\(.)")
_COPY_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r"}


def _copy_special_in(text: str) -> bool:
    """Whether `text` holds a character COPY escapes or drops (_COPY_SPECIAL): five scans of `in`, which
    run at memory speed, where the pattern's character-set search costs about 40 instructions a character
    (16,000 per audit row, counted with callgrind)."""
    return "\\" in text or "\t" in text or "\n" in text or "\r" in text or "\x00" in text


def _json_default(value: object) -> object:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _json_text(value: object) -> str:
    """Compact JSON that jsonb accepts (no NUL), escaped for COPY (JSON has no raw tab or newline)."""
    try:
        data = orjson.dumps(value, default=_json_default)
    except TypeError:  # lone surrogates, non-string keys: the standard library takes them
        data = None
    if data is None or b"\\u0000" in data:
        text = json.dumps(_without_nul(value), default=_json_default, ensure_ascii=False, separators=(",", ":"))
    else:
        text = data.decode()
    return text.replace("\\", "\\\\")


def _compressed_text(data: bytes, dictionary: int) -> str:
    # bytea in hex; the backslash of "\x" doubled for COPY's text format
    return "\\\\x" + detail_compress(data, dictionary).hex()


def field_text(column: Column, value: object) -> str:
    if value is None:
        return "\\N"
    kind = column.kind
    if kind == "compressed":
        return _compressed_text(json_bytes(value), column.dictionary)
    if kind == "json":
        return _json_text(value)
    if kind == "bool":
        return "t" if value else "f"
    if kind == "text":
        text = value if isinstance(value, str) else str(value)
        if column.limit is not None and len(text) > column.limit:
            text = text[:column.limit]
    else:
        text = value.isoformat() if isinstance(value, (datetime, date)) else str(value)
    return text.translate(_COPY_ESCAPES) if _COPY_SPECIAL.search(text) else text


def _text_encoder(limit: int | None) -> Callable[[object], str]:
    def encode(value: object) -> str:
        if value is None:
            return "\\N"
        text = value if isinstance(value, str) else str(value)
        if limit is not None and len(text) > limit:
            text = text[:limit]
        return text.translate(_COPY_ESCAPES) if _copy_special_in(text) else text

    return encode


def _compressed_encoder(column: Column) -> Callable[[object], str]:
    # The field's text, remembered for the values seen lately (the replicas of a Deployment send the
    # same containers, patch, resources and warnings): no compression, hex or join for those.
    memo: dict[bytes, str] = {}

    def encode(value: object) -> str:
        if value is None:
            return "\\N"
        data = json_bytes(value)
        text = memo.get(data)
        if text is None:
            text = _compressed_text(data, column.dictionary)
            if len(data) <= MEMO_MAX_BYTES:
                if len(memo) >= MEMO_ENTRIES:
                    memo.clear()
                memo[data] = text
        return text

    return encode


def _column_encoder(column: Column) -> Callable[[object], str]:
    """field_text for one column, with the column's kind decided once (row_encode is on the request path)."""
    if column.kind == "text":
        return _text_encoder(column.limit)
    if column.kind == "compressed":
        return _compressed_encoder(column)
    if column.kind == "json":
        return lambda value: field_text(column, value)
    if column.kind == "bool":
        return lambda value: "\\N" if value is None else "t" if value else "f"
    return lambda value: field_text(column, value)


# row_encode is on the request path of every audited admission, and a Python call per column was most of
# its cost (per admission, counted with scripts/bench-instructions: docs/benchmarks.md). The text and value
# columns, when they hold what an audit row usually holds (str, int, float within the column's limit, no
# character COPY escapes), are written by C-level calls over all of them at once; anything else, and the
# other columns, by their column's encoder, as field_text would.
_PLAIN_TYPES = frozenset({str, int, float})


class _Plan:
    """How to encode some of the table's columns: the plain ones at once, the others one by one."""

    def __init__(self, columns: tuple[Column, ...]) -> None:
        plain = tuple(c for c in columns if c.kind in ("text", "value"))
        self.columns = plain + tuple(c for c in columns if c not in plain)  # the order `fields` gives them in
        self.plain_names = tuple(c.name for c in plain)
        self.plain_defaults = tuple(c.default for c in plain)
        self.plain_limits = tuple(c.limit if c.kind == "text" and c.limit is not None else sys.maxsize for c in plain)
        self.encoders = tuple((c.name, c.default, _column_encoder(c)) for c in self.columns)
        self.others = self.encoders[len(plain):]  # the same encoders (a compressed column's memo is made once)

    def fields(self, record: AuditRecord) -> list[str]:
        """The columns' texts, in self.columns' order."""
        get = record.get
        values = list(map(get, self.plain_names, self.plain_defaults))
        if _PLAIN_TYPES.issuperset(map(type, values)):
            plain = list(map(str, values))
            if not (any(map(operator.gt, map(len, plain), self.plain_limits)) or _copy_special_in("".join(plain))):
                return plain + [encode(get(name, default)) for name, default, encode in self.others]
        return [encode(get(name, default)) for name, default, encode in self.encoders]


def _in_table_order(columns: tuple[Column, ...]) -> Callable[[list[str]], tuple[str, ...]]:
    """Fields given in `columns`' order (all of the table's), put in the table's order."""
    names = [c.name for c in columns]
    return operator.itemgetter(*(names.index(column.name) for column in TABLE_COLUMNS))


def _line_function(own: _Plan) -> tuple[LineFunction, list[list[str]]]:
    """lines.line_function for the table, with `own`'s columns read from the record (through its encoders where
    they need one) and the others given as texts."""
    encoders = {name: encode for name, _, encode in own.encoders}
    return line_function([(c.name, c.kind, c.limit, c.default, encoders.get(c.name)) for c in TABLE_COLUMNS],
                         frozenset(COLUMNS) - frozenset(encoders), _copy_special_in)


_ALL = _Plan(TABLE_COLUMNS)
_ALL_IN_TABLE_ORDER = _in_table_order(_ALL.columns)
_ALL_LINE, _ = _line_function(_ALL)


def row_encode(record: AuditRecord) -> bytes:
    """One COPY text line for HEADER's columns: strings cut to their column, no NUL, valid UTF-8.

    A field missing from the record takes the model field's default. Lone surrogates (legal in
    Python strings parsed from JSON, not in UTF-8) become "?". Each field is field_text's. A
    SharedFieldsRecord's shared fields are encoded once for every row that shares them: a shared dict and its
    values must not change after it is given here, since its texts are remembered by its identity.
    """
    # The usual record in one generated call (lines.py); column by column when it returns None.
    if type(record) is SharedFieldsRecord:
        own, shared_texts, order, line_of, runs = _shared_layout(record.shared)
        line = line_of(record, runs)
        if line is None:
            line = "\t".join(order(own.fields(record) + shared_texts)) + "\n"
    else:
        line = _ALL_LINE(record, ())
        if line is None:
            line = "\t".join(_ALL_IN_TABLE_ORDER(_ALL.fields(record))) + "\n"
    return line.encode("utf-8", "replace")


class SharedFieldsRecord(dict[str, Any]):
    """An audit record some of whose fields are those of `shared`, a dict that other rows share unchanged
    (the fields that follow from a remembered decision: mutations/webhook/record.py). row_encode encodes
    `shared` once, by its identity, for all of them; the record must hold shared's values for its keys.
    Made by shared_fields_record."""

    __slots__ = ("shared",)
    shared: AuditRecord


def shared_fields_record(own: AuditRecord, shared: AuditRecord) -> SharedFieldsRecord:
    """`own`'s fields and `shared`'s (shared's win), encoded as a SharedFieldsRecord."""
    record = SharedFieldsRecord(own)  # dict's own constructor: no Python __init__ on the request path
    record.update(shared)
    record.shared = shared
    return record


# By the identity of a shared dict: the plan for the other columns, the shared columns' texts, and the order
# that puts both back in the table's. Each entry holds its dict (no other takes its id while it is kept).
# Bounded, cleared when full. Plans by the set of shared names: a few, made once.
SHARED_ENTRIES = 256
_Order: TypeAlias = Callable[[list[str]], tuple[str, ...]]
# The own columns' plan, the shared columns' texts, the order of both, the line function and its runs' texts
_Layout: TypeAlias = tuple[_Plan, list[str], _Order, LineFunction, list[str]]
_shared_seen: dict[int, tuple[AuditRecord, _Layout]] = {}
_plans: dict[frozenset[str], tuple[_Plan, _Plan, _Order, LineFunction, list[list[str]]]] = {}


def _shared_layout(shared: AuditRecord) -> _Layout:
    found = _shared_seen.get(id(shared))
    if found is not None and found[0] is shared:
        return found[1]
    names = frozenset(shared) & frozenset(COLUMNS)
    plans = _plans.get(names)
    if plans is None:
        own = _Plan(tuple(c for c in TABLE_COLUMNS if c.name not in names))
        common = _Plan(tuple(c for c in TABLE_COLUMNS if c.name in names))
        plans = _plans[names] = (own, common, _in_table_order(own.columns + common.columns), *_line_function(own))
    own, common, order, line_of, runs = plans
    shared_texts = common.fields(shared)
    text_of = dict(zip((c.name for c in common.columns), shared_texts, strict=True))
    layout = (own, shared_texts, order, line_of, ["\t".join(text_of[name] for name in run) for run in runs])
    if len(_shared_seen) >= SHARED_ENTRIES:
        _shared_seen.clear()
    _shared_seen[id(shared)] = (shared, layout)
    return layout


def copy_text_value(raw: bytes) -> str:
    """One field of a COPY text line as the text it stands for; ValueError for NULL (\\N)."""
    if raw == b"\\N":
        raise ValueError("NULL")
    text = raw.decode("utf-8")
    return _COPY_UNESCAPE.sub(lambda m: _COPY_UNESCAPES.get(m.group(1), m.group(1)), text) if "\\" in text else text


def row_decode(columns: tuple[str, ...], line: bytes, *, detail_as_json: bool = False,
               json_text: frozenset[str] = frozenset()) -> AuditRecord:
    """The record a COPY text line holds (for the ORM path and for reading set-aside rows).

    `detail_as_json`: a line of a v1 segment, whose compressed columns hold JSON text; `json_text`: the
    compressed columns that hold JSON text in this line (V2_JSON_TEXT for a v2 segment's).
    """
    values = line.rstrip(b"\n").decode("utf-8").split("\t")
    if len(values) != len(columns):
        raise ValueError(f"{len(values)} fields for {len(columns)} columns")
    record: AuditRecord = {}
    for name, raw in zip(columns, values, strict=True):
        if raw == "\\N":
            record[name] = None
            continue
        text = _COPY_UNESCAPE.sub(lambda m: _COPY_UNESCAPES.get(m.group(1), m.group(1)), raw) if "\\" in raw else raw
        kind = KINDS.get(name)
        if kind == "compressed" and not detail_as_json and name not in json_text:
            if not text.startswith("\\x"):
                raise ValueError(f"{name} is not a compressed detail value")
            record[name] = json.loads(detail_decompress(bytes.fromhex(text[2:])))
        elif kind in ("json", "compressed"):
            record[name] = json.loads(text)
        else:
            record[name] = (text == "t") if kind == "bool" else text
    return record


def _without_nul(value: object) -> object:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value
