"""The dashboard's Budgets page (sync_quotas' rows) and the queue/PriorityClass on an admission's detail page."""

import pytest
from django.utils import timezone

from mutations.models import AdmissionAudit
from profiles.models import NamespacePolicy, NamespaceQuota
from tests.support import pods
from tests.support.audit import audit_row
from tests.support.ui import page_of

pytestmark = pytest.mark.django_db
MEMORY, NUMBER = "requests.volcano.sh/vgpu-memory", "requests.volcano.sh/vgpu-number"


def quota(namespace, **fields):
    defaults = {"policy_namespace": namespace, "hard": {}, "status_hard": {}, "status_used": {}, "action": "unchanged",
                "synced_at": timezone.now()}
    return NamespaceQuota.objects.create(namespace=namespace, **{**defaults, **fields})


def test_budgets_page_needs_a_staff_login(client):
    response = client.get("/dashboard/budgets/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_budgets_page_shows_each_namespace_used_and_hard(staff_client):
    quota("team-a", hard={MEMORY: "163840", NUMBER: "8"}, status_hard={MEMORY: "163840", NUMBER: "8"},
          status_used={MEMORY: "40960", NUMBER: "3"})
    quota("ml-research", policy_namespace="ml-*", hard={NUMBER: "2"}, status_hard={NUMBER: "2"},
          status_used={NUMBER: "2"})
    page = page_of(staff_client.get("/dashboard/budgets/"))
    assert "40 / 160 GiB" in page and "3 / 8" in page
    assert "ml-research" in page and "ml-*" in page and "2 / 2" in page
    assert 'class="meter full"' in page  # ml-research has used its whole budget
    assert "every 5 minutes" in page


def test_budgets_page_shows_a_just_created_quota_as_not_yet_counted(staff_client):
    quota("team-a", hard={NUMBER: "8"}, action="created")
    assert "? / 8" in page_of(staff_client.get("/dashboard/budgets/"))


def test_budgets_page_highlights_a_failed_namespace_with_its_reason(staff_client):
    quota("team-e", hard={NUMBER: "2"}, action="failed", message="a ResourceQuota named volcano-injector-vgpu ...")
    page = page_of(staff_client.get("/dashboard/budgets/"))
    assert '<tr class="problem">' in page and "a ResourceQuota named volcano-injector-vgpu" in page


def test_budgets_page_reads_one_table_once(staff_client, django_assert_num_queries):
    for n in range(5):
        quota(f"team-{n}", hard={NUMBER: "2"})
    with django_assert_num_queries(3):  # session, user, the quotas
        staff_client.get("/dashboard/budgets/")


def test_detail_shows_the_queue_and_class_the_webhook_set(staff_client, post_review):
    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", priority_class="team-a-normal")
    post_review(pods.review(pods.vllm_deployment_pod()))
    row = AdmissionAudit.objects.get()
    page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    assert "<dt>Volcano queue</dt><dd><code>team-a</code> (set by the webhook)" in page
    assert "<code>team-a-normal</code> (set by the webhook; the API server fills spec.priority from it)" in page


def test_detail_says_when_the_webhook_left_queue_and_class_alone(staff_client):
    row = audit_row()
    page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    assert "<dt>Volcano queue</dt><dd>not set by the webhook" in page
    assert "<dt>PriorityClass</dt><dd>not set by the webhook" in page
