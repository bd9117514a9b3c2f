"""The dashboard and the audit API on the embedded SQLite database of development (the README's first command):
every page an operator opens, in a process of its own, since the test run's database is PostgreSQL.

SQL written for PostgreSQL (a parenthesised SELECT in a UNION, a partition, a statement timeout) fails there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from .conftest import REPO_ROOT
from .test_scripts import NOT_PASSED_TO_DEV

PAGES = textwrap.dedent("""
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.contrib.auth import get_user_model
    from profiles.models import ObjectChange, OversubscriptionPolicy, Preset
    from tests.support.audit import audit_row

    assert connection.vendor == "sqlite", connection.vendor
    call_command("migrate", verbosity=0)
    preset = Preset.objects.get(name="llm-7b")
    for text in ("first edit", "second edit"):
        preset.description = text
        preset.save()
    first = ObjectChange.objects.filter(object_repr="llm-7b").order_by("id").first()
    row = audit_row(config_version=first.id, preset_name="llm-7b", decision="audit-only",
                    reason="would deny: too large (catalog Qwen2.5-7B-Instruct)")
    OversubscriptionPolicy.objects.create(name="l4", node_selector={"pool": "l4"}, oversubscription_ratio=2)
    user = get_user_model().objects.create_superuser("operator", password="pw-for-tests-only")
    client = Client()
    client.force_login(user)
    for path in ["/dashboard/", "/dashboard/?window=90d", "/dashboard/history/",
                 "/dashboard/history/?user=alice%40example.com&reason=too", "/dashboard/history.csv",
                 row.get_absolute_url(), f"/dashboard/admissions/{row.id}/", "/dashboard/rehearsal/?namespace=team-a",
                 "/dashboard/changes/", "/api/v1/audit/", f"/api/v1/audit/{row.id}/", "/api/v1/changes/",
                 "/dashboard/gpu-pools/", "/api/v1/gpu-nodes/?label=pool%3Da100&has_problems=true",
                 "/api/v1/oversubscription-policies/", "/api/v1/gpu-models/"]:
        response = client.get(path)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200, (path, response.status_code, body[:500])
        print("ok", path)
    # the preset as the row's version left it, and the later change linked
    detail = client.get(row.get_absolute_url()).content.decode()
    assert "first edit" in detail and "second edit" not in detail, detail
    assert f"change {first.id}</a> left it" in detail and "changed since</a>" in detail, detail
""")


def test_the_dashboard_and_audit_api_answer_on_the_development_sqlite_database(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_PASSED_TO_DEV)}
    env.update(SQLITE_PATH=str(tmp_path / "db.sqlite3"), INJECTOR_DEV_MODE="true", LOG_LEVEL="ERROR",
               DJANGO_SETTINGS_MODULE="injector_site.settings", PYTHONPATH=str(REPO_ROOT),
               INJECTOR_AUDIT_WRITER_AUTOSTART="false", INJECTOR_AUDIT_SPOOL_DIR=str(tmp_path / "spool"))
    result = subprocess.run([sys.executable, "-c", PAGES], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.count("ok ") == 16
