"""manage.py preview_pod and issue_token."""

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from mutations.audit import audit_flush
from mutations.models import AdmissionAudit
from profiles.models import ApiToken, NamespacePolicy
from profiles.selectors import pod_yaml
from tests.support import pods

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def pod_file(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(pod_yaml(pod=pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})))
    return path


def test_preview_pod_prints_decision_preset_and_a_diff(pod_file):
    out = run("preview_pod", str(pod_file), "--namespace", "team-a")
    assert "decision: mutated" in out and "preset:   llm-7b" in out and "policy:   *" in out
    assert "-        nvidia.com/gpu: '1'" in out
    assert "+        volcano.sh/vgpu-memory: '23552'" in out


def test_preview_pod_uses_the_namespace_policy(pod_file):
    NamespacePolicy.objects.create(namespace="team-a", mode="off")
    out = run("preview_pod", str(pod_file), "--namespace", "team-a")
    assert "decision: skipped" in out and "(no changes)" in out


def test_preview_pod_json_gives_the_patch(pod_file):
    body = json.loads(run("preview_pod", str(pod_file), "-n", "team-a", "--json"))
    assert body["preset"] == "llm-7b"
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"} in body["patch"]


def test_preview_pod_writes_no_audit_row(pod_file):
    run("preview_pod", str(pod_file), "--namespace", "team-a")
    audit_flush(timeout_seconds=10)
    assert AdmissionAudit.objects.count() == 0


def test_preview_pod_reports_a_missing_file(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("preview_pod", str(tmp_path / "missing.yaml"), "--namespace", "team-a")


def test_preview_pod_reports_a_file_that_is_not_a_pod(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text("kind: Deployment\nspec:\n  template: {}\n")
    with pytest.raises(CommandError, match="expected kind: Pod"):
        run("preview_pod", str(path), "--namespace", "team-a")


def test_issue_token_prints_a_token_that_authenticates():
    User.objects.create_user("ci-bot")
    key = run("issue_token", "ci-bot").strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/presets/").status_code == 200


def get_with(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/v1/presets/")


def test_issue_token_shows_a_token_once_and_stores_only_its_digest():
    """Printed once: a database dump, the admin or a second call never shows it again."""
    User.objects.create_user("ci-bot")
    first, second = run("issue_token", "ci-bot").strip(), run("issue_token", "ci-bot").strip()
    assert first != second and get_with(first).status_code == get_with(second).status_code == 200
    stored = list(ApiToken.objects.values_list("digest", "prefix"))
    assert len(stored) == 2 and not any(first in value or second in value for row in stored for value in row)


def test_issue_token_rotate_revokes_the_old_tokens():
    User.objects.create_user("ci-bot")
    old = run("issue_token", "ci-bot").strip()
    new = run("issue_token", "ci-bot", "--rotate").strip()
    assert get_with(old).status_code == 401 and get_with(new).status_code == 200


def test_an_expired_token_is_refused_and_says_so():
    User.objects.create_user("ci-bot")
    token = run("issue_token", "ci-bot", "--days", "1").strip()
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    response = get_with(token)
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_a_token_records_when_it_was_last_used():
    User.objects.create_user("ci-bot")
    token = run("issue_token", "ci-bot").strip()
    assert ApiToken.objects.get().last_used_at is None
    get_with(token)
    assert timezone.now() - ApiToken.objects.get().last_used_at < timedelta(seconds=30)


def test_issue_token_for_an_unknown_user_is_an_error():
    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("issue_token", "nobody")
