"""A PostgreSQL database's schema and seeded rows as comparable text: what tests/test_migrations_squashed.py
compares between the squashed migrations and the chain they replace (tests/fixtures/schema/).

Only our apps' objects (mutations_*, profiles_*: tables, their partitions, indexes, constraints, triggers and
sequences, and our functions), and the extensions: Django's and other apps' tables change with their own
releases. The schema is `pg_dump --schema-only` of those tables, without comments, ownership and session
settings, with the audit table's day partitions named by their place among the partition days (`_p+0` the
oldest) instead of their date (a database migrated today and the snapshot taken on another day then read the
same), after the extensions and our functions' definitions: a script psql can run, once the dates are put
back. The rows are every row of our tables, without their time columns (the time the migration ran), and our
sequences' states.

Regenerate the fixtures from a migrated database (only when the schema changes on purpose, with a
new migration): `python -m tests.support.schema postgres://postgres@127.0.0.1:5432/NAME tests/fixtures/schema`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

OURS = ("mutations", "profiles")
PARTITION = re.compile(r"mutations_admissionaudit_p(\d{8})")
BOUND = re.compile(r"FOR VALUES FROM \('(\d{4}-\d{2}-\d{2}) 00:00:00\+00'\) TO \('(\d{4}-\d{2}-\d{2}) 00:00:00\+00'\)")


def _day(text: str) -> date:
    digits = text.replace("-", "")
    return date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))


def schema_dump(url: str) -> str:
    """The extensions, our functions, and our apps' tables as pg_dump writes them, normalised."""
    import psycopg

    parts = urlsplit(url)
    tables = [arg for app in OURS for arg in ("-t", f"public.{app}_*")]
    done = subprocess.run(
        ["pg_dump", "--schema-only", "--no-owner", "--no-privileges", "--no-comments", *tables,
         "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres",
         parts.path.lstrip("/")],
        capture_output=True, text=True, check=True, timeout=120)
    # A script psql can run: the extensions and our functions first (the triggers name them), then the tables.
    with psycopg.connect(url) as conn:
        kept = [f"CREATE EXTENSION IF NOT EXISTS {name};" for (name,) in conn.execute(
            "SELECT extname FROM pg_extension ORDER BY 1")]
        kept += [f"{definition.rstrip()};" for (definition,) in conn.execute(
            "SELECT pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace "
            "AND proname ~ %s ORDER BY proname", [f"^({'|'.join(OURS)})_"])]
    kept += [line for line in done.stdout.splitlines()
             if line.strip() and not line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\restrict",
                                                      "\\unrestrict"))]
    text = "\n".join(kept) + "\n"
    days = sorted({_day(d) for d in PARTITION.findall(text)})
    if not days:
        return text
    first = days[0]

    def relative(day: date) -> str:
        return f"+{(day - first).days}"

    text = BOUND.sub(lambda m: f"FOR VALUES FROM (day {relative(_day(m[1]))}) TO (day {relative(_day(m[2]))})", text)
    return PARTITION.sub(lambda m: f"mutations_admissionaudit_p{relative(_day(m[1]))}", text)


def seeded_rows(url: str) -> str:
    """Every row of our tables without time columns, and our sequences' states, as JSON."""
    import psycopg

    pattern = f"^({'|'.join(OURS)})_"
    with psycopg.connect(url) as conn:
        tables = [name for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND c.relname ~ %s ORDER BY 1", [pattern])]
        rows: dict[str, object] = {}
        for table in tables:
            columns = [name for (name,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped AND atttypid NOT IN ('timestamptz'::regtype, 'timestamp'::regtype, "
                "'date'::regtype) ORDER BY attnum", [table])]
            selected = ", ".join(f'"{c}"::text' for c in columns)
            rows[table] = [list(r) for r in conn.execute(f'SELECT {selected} FROM "{table}" ORDER BY 1')]
        rows["sequences"] = [list(r) for r in conn.execute(
            "SELECT sequencename, start_value::text, last_value::text FROM pg_sequences "
            "WHERE sequencename ~ %s ORDER BY 1", [pattern])]
    return json.dumps(rows, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


if __name__ == "__main__":
    url, directory = sys.argv[1], Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "schema.sql").write_text(schema_dump(url))
    (directory / "rows.json").write_text(seeded_rows(url))
