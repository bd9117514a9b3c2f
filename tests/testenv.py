"""Loaded with `-p tests.testenv` before Django: tests run on the local PostgreSQL, in dev mode."""

import os
import tempfile

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.setdefault("INJECTOR_DEV_MODE", "true")
# Compare the configuration version on every admission, so a change is seen by the next call.
os.environ.setdefault("INJECTOR_CONFIG_RECHECK_SECONDS", "0")
os.environ.setdefault("INJECTOR_AUDIT_SPOOL_DIR", tempfile.mkdtemp(prefix="volcano-injector-spool-"))
os.environ.setdefault("LOG_LEVEL", "WARNING")
# One test database per run: runs side by side on one machine (several checkouts, a benchmark)
# would otherwise drop each other's database.
os.environ.setdefault("DB_TEST_NAME", f"test_volcano_injector_{os.getpid()}")
# The tests write audit rows with audit_flush() in their own transaction, not from a background thread.
os.environ.setdefault("INJECTOR_AUDIT_WRITER_AUTOSTART", "false")
# The heavy requests' slot files (injector_site/platform/heavy.py) of this run only: runs side by side on one
# machine would otherwise count each other's requests as their own replica's.
os.environ.setdefault("INJECTOR_HEAVY_SLOTS_DIR", tempfile.mkdtemp(prefix="volcano-injector-heavy-"))
