"""Denials the dashboard explains, audit-only rows shown as rehearsals, and links between rows and configuration."""

import re
from datetime import datetime, timedelta

import pytest
import yaml
from django.utils import timezone

from mutations.audit import rehearsal
from mutations.models import AdmissionAudit
from profiles.models import LanguageModel, NamespacePolicy, Preset
from tests.support import pods
from tests.support.audit import audit_row
from tests.support.ui import admission_ids, page_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_policy():
    """team-*: at most 49152 MiB per vGPU, presets up to llm-14b (llm-32b exists but is not allowed)."""
    policy = NamespacePolicy.objects.create(namespace="team-*", max_vgpu_memory_mib=49152, max_vgpus_per_pod=2)
    policy.allowed_presets.set(Preset.objects.filter(name__in=["llm-1.5b", "llm-7b", "llm-14b", "default"]))
    return policy


def test_a_denied_model_size_is_explained_on_the_row_history_and_detail(staff_client, post_review, team_policy):
    response = post_review(pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "20B"})))
    message = response.json()["response"]["status"]["message"]
    # The API server's message: what was asked, the rule with its policy, where the number came from, a fix.
    assert "namespace policy 'team-*' allows at most 49152 MiB per vGPU" in message
    assert "from model-size 20B: estimated for a 20B fp16 model" in message and "Fix: " in message
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and row.reason == message
    assert row.explanation["asked"][0] == "model-size 20B"
    assert row.explanation["violations"][0]["rule"] == "policy.max_vgpu_memory_mib"
    assert any("'llm-32b' serves this model size" in f for f in row.explanation["fixes"])

    history = page_of(staff_client.get("/dashboard/history/"))
    assert re.search(r'<td class="reason-cell"[^>]*>[^<]*allows at most 49152 MiB per vGPU', history)

    detail = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    assert "What the Pod asked for" in detail and "<code>model-size 20B</code>" in detail
    assert "Where the size came from" in detail and "How to fix it" in detail
    assert "the namespace policy's most memory per vGPU (max_vgpu_memory_mib)" in detail
    assert 'href="/dashboard/policies/team-*/"' in detail  # the rule links to its policy


def test_the_policy_page_shows_its_settings_its_denials_and_links_back_to_each_row(staff_client, team_policy):
    denial = audit_row(decision="denied", policy_name="team-*", preset_name="", reason="the Pod asks for 4 vGPUs")
    would = audit_row(decision="audit-only", policy_name="team-*", reason="would deny: the Pod asks for 3 vGPUs")
    other = audit_row(decision="denied", policy_name="*", reason="somewhere else")
    page = page_of(staff_client.get("/dashboard/policies/team-*/"))
    assert "49,152 MiB (48 GiB)" in page and "llm-14b" in page  # its settings, in the pages' one number format
    assert f'href="/admin/profiles/namespacepolicy/{team_policy.pk}/change/"' in page
    assert f'href="{denial.get_absolute_url()}"' in page and f'href="{would.get_absolute_url()}"' in page
    assert f'href="{other.get_absolute_url()}"' not in page
    assert 'href="/dashboard/history/?policy=team-%2A"' in page


def test_the_preset_page_lists_the_admissions_it_sized(staff_client):
    sized = audit_row(preset_name="llm-7b")
    other = audit_row(preset_name="default")
    page = page_of(staff_client.get("/dashboard/presets/llm-7b/"))
    assert "23,552 MiB (23 GiB)" in page and f'href="{sized.get_absolute_url()}"' in page
    assert f'href="{other.get_absolute_url()}"' not in page
    assert "No preset of this name" in page_of(staff_client.get("/dashboard/presets/gone/"))


def test_history_filters_by_policy_and_tells_would_deny_from_would_apply(staff_client):
    would_deny = audit_row(decision="audit-only", reason="would deny: too many vGPUs", policy_name="lab")
    would_apply = audit_row(decision="audit-only", reason="would apply: converted 1 GPU(s)", policy_name="lab")
    audit_row(decision="denied", reason="denied", policy_name="*")

    def listed(query):
        return set(admission_ids(page_of(staff_client.get(f"/dashboard/history/?{query}"))))

    assert listed("decision=would-deny") == {would_deny.id}
    assert listed("decision=would-apply") == {would_apply.id}
    assert listed("policy=lab") == {would_deny.id, would_apply.id}
    page = page_of(staff_client.get("/dashboard/history/?policy=lab"))
    assert '<span class="badge audit-only would-deny">would deny</span>' in page
    assert '<span class="badge audit-only would-apply">would apply</span>' in page


def test_an_audit_only_detail_never_says_granted(staff_client):
    row = audit_row(decision="audit-only", reason="would apply: converted 1 GPU(s) to vGPUs (namespace policy lab)",
                    policy_name="lab", patch=[{"op": "add", "path": "/metadata/annotations",
                                               "value": {"volcano-injector.io/applied-preset": "default"}}])
    page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    assert "granted" not in page.replace("would grant", "")
    assert "What enforce would grant" in page and "Annotations it would set on the Pod" in page
    assert "this is what enforce <strong>would apply</strong>" in page


def test_the_admin_preview_lists_every_violation_and_the_fixes(admin_client, team_policy):
    pod = pods.ray_worker_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    response = admin_client.post("/admin/profiles/namespacepolicy/preview/",
                                 {"namespace": "team-a", "pod_yaml": yaml.safe_dump(pod)})
    page = page_of(response)
    explanation = re.search(r'<div id="pod-preview-explanation">(.*?)</div>', page, re.S).group(1)
    assert "2 rules broken" in explanation
    assert "remove securityContext.privileged from container 'ray-worker'" in explanation
    assert "ask for nvidia.com/gpu: 2" in explanation  # verified: the engine admits the Pod so changed


def test_the_denied_or_failed_card_links_to_exactly_what_it_counts(staff_client):
    denied = audit_row(decision="denied", reason="no", preset_name="")
    error = audit_row(decision="error", reason="internal error: boom", preset_name="")
    audit_row()
    page = page_of(staff_client.get("/dashboard/"))
    assert re.search(r'href="/dashboard/history/\?decision=denied-or-error"><div class="label">Denied or failed</div>'
                     r'<div class="value">2<', page)
    listed = page_of(staff_client.get("/dashboard/history/?decision=denied-or-error"))
    assert set(admission_ids(listed)) == {denied.id, error.id}


def test_the_overview_counts_what_audit_only_namespaces_would_deny(staff_client):
    audit_row(decision="audit-only", reason="would deny: the Pod asks for 4 vGPUs")
    audit_row(decision="audit-only", reason="would apply: converted 1 GPU(s) to vGPUs")
    audit_row(decision="audit-only", reason="would apply: converted 1 GPU(s) to vGPUs")
    page = page_of(staff_client.get("/dashboard/"))
    assert re.search(r'Audit-only: would deny</div><div class="value">1</div><div class="what">Pods enforce would '
                     r'refuse \(admitted unchanged\); 2 would be converted', page)


def test_the_rehearsal_page_says_what_enforce_would_do_in_a_namespace(staff_client):
    audit_row(namespace="lab-a", decision="audit-only", policy_name="lab-*", vgpu_memory_mib=0,
              reason="would deny: the Pod asks for 4 vGPUs", field="spec.containers[*].resources.limits[x]")
    audit_row(namespace="lab-a", decision="audit-only", policy_name="lab-*", vgpu_memory_mib=2048 * 1024,
              reason="would apply: converted 1 GPU(s) to vGPUs")
    audit_row(namespace="lab-b", decision="audit-only", reason="would deny: elsewhere")
    page = page_of(staff_client.get("/dashboard/rehearsal/?namespace=lab-a"))
    assert re.search(r'Would deny</div><div class="value">1<', page)
    assert re.search(r'Would apply</div><div class="value">1<', page)
    assert re.search(r'vGPU memory it would grant</div><div class="value">2,097,152 <small>MiB \(2,048 GiB\)', page)
    assert "spec.containers[*].resources.limits[x]" in page and "elsewhere" not in page
    assert 'href="/dashboard/policies/lab-*/"' in page


def test_the_rehearsal_page_says_since_which_hour_it_counts(staff_client):
    audit_row(namespace="lab-a", decision="audit-only", reason="would deny: the Pod asks for 4 vGPUs")
    page = page_of(staff_client.get("/dashboard/rehearsal/?namespace=lab-a"))
    assert f"since {rehearsal.rehearsal_since():%Y-%m-%d %H:00} UTC" in page
    assert re.search(r'Would deny</div><div class="value">1<', page)


def test_policies_read_from_the_newest_rows_say_so_when_the_window_holds_more(monkeypatch, staff_client):
    monkeypatch.setattr(rehearsal, "POLICY_ROWS_READ", 2)
    audit_row(namespace="lab-a", policy_name="old-policy", created_at=timezone.now() - timedelta(hours=3))
    for minutes in (1, 2):
        audit_row(namespace="lab-a", policy_name="lab-*", created_at=timezone.now() - timedelta(minutes=minutes))
    found = rehearsal.namespace_rehearsal(namespace="lab-a")
    assert found.policies == ["lab-*"] and found.policies_cut
    page = page_of(staff_client.get("/dashboard/rehearsal/?namespace=lab-a"))
    assert "the newest 2 of them decided under" in page and "old-policy" not in page
    monkeypatch.setattr(rehearsal, "POLICY_ROWS_READ", 3)
    found = rehearsal.namespace_rehearsal(namespace="lab-a")
    assert found.policies == ["lab-*", "old-policy"] and not found.policies_cut


def test_the_root_opens_the_dashboard_and_the_admin_links_to_it(admin_client, client):
    assert client.get("/")["Location"] == "/dashboard/"
    assert client.get("/dashboard/")["Location"].startswith("/admin/login/")  # anonymous: log in first
    index = page_of(admin_client.get("/admin/"))
    assert '<a href="/dashboard/"><strong>Open the audit dashboard</strong></a>' in index
    assert 'href="/dashboard/">View site</a>' in index


def test_policy_and_preset_admin_pages_link_to_their_admissions(admin_client, team_policy):
    preset = Preset.objects.get(name="llm-7b")
    policy_page = page_of(admin_client.get(f"/admin/profiles/namespacepolicy/{team_policy.pk}/change/"))
    assert 'href="/dashboard/policies/team-*/">admissions and recent denials</a>' in policy_page
    assert 'href="/dashboard/history/?policy=team-%2A">full history</a>' in policy_page
    preset_page = page_of(admin_client.get(f"/admin/profiles/preset/{preset.pk}/change/"))
    assert 'href="/dashboard/presets/llm-7b/">admissions and recent denials</a>' in preset_page


def test_the_rehearsal_groups_what_enforce_would_deny_by_the_rule_with_counts_and_examples(staff_client, post_review):
    NamespacePolicy.objects.create(namespace="lab-*", mode="audit-only", max_vgpus_per_pod=1)
    for _ in range(2):  # two Pods over the policy's vGPUs per Pod
        post_review(pods.review(pods.vllm_deployment_pod(gpus="2", namespace="lab-a")))
    post_review(pods.review(pods.vllm_deployment_pod(
        namespace="lab-a", annotations={"volcano-injector.io/preset": "no-such-preset"})))
    post_review(pods.review(pods.vllm_deployment_pod(namespace="lab-a")))  # would apply: not a denial
    rows = {r.id: r for r in AdmissionAudit.objects.filter(decision="audit-only", reason__startswith="would deny")}
    assert len(rows) == 3
    page = page_of(staff_client.get("/dashboard/rehearsal/?namespace=lab-a"))
    assert "2 rules would deny 3 Pods" in page
    rules = re.findall(r'<li class="rule" data-rule="([^"]+)">(.*?)</li>\s*(?=<li class="rule"|</ol>)', page, re.S)
    assert [rule for rule, _ in rules] == ["policy.max_vgpus_per_pod", "preset.unknown"]  # most Pods first
    vgpus, unknown = (body for _, body in rules)
    assert "the namespace policy's most vGPUs per Pod (max_vgpus_per_pod)" in vgpus
    assert re.search(r'class="rule-count"><span class="num">2</span> Pods', vgpus)
    assert 'href="/dashboard/policies/lab-*/"' in vgpus  # the policy that owns the rule
    assert re.search(r'class="rule-count"><span class="num">1</span> Pod<', unknown)
    assert "no-such-preset" in unknown
    examples = detail_ids(vgpus)
    assert len(examples) == 2 and examples <= set(rows)  # each example opens its row
    assert all(rows[i].explanation["violations"][0]["rule"] == "policy.max_vgpus_per_pod" for i in examples)


QWEN = "Qwen2.5-7B-Instruct"  # in the seeded model catalog; pods.vllm_deployment_pod serves it


def section(page: str, heading: str) -> str:
    """The panel under an h2 of the page."""
    return page.split(f"<h2>{heading}</h2>", 1)[1].split("</section>", 1)[0]


def detail_ids(text: str) -> set[int]:
    return set(admission_ids(text))


def test_rows_sized_by_a_catalog_model_link_to_it_and_its_pages_link_back(staff_client, admin_client, post_review):
    NamespacePolicy.objects.create(namespace="strict", max_vgpu_memory_mib=8192)
    post_review(pods.review(pods.vllm_deployment_pod()))  # sized from the serving command by the catalog
    post_review(pods.review(pods.vllm_deployment_pod(namespace="strict")))  # more than strict allows per vGPU
    converted = AdmissionAudit.objects.get(decision="mutated")
    denied = AdmissionAudit.objects.get(decision="denied")
    by_preset = audit_row(preset_name="llm-7b")  # sized by a preset: no model
    model_href = f'class="model-link" href="/dashboard/models/{QWEN}/"'
    assert model_href in page_of(staff_client.get(f"/dashboard/admissions/{converted.id}/"))
    assert model_href in page_of(staff_client.get(f"/dashboard/admissions/{denied.id}/"))
    assert "model-link" not in page_of(staff_client.get(f"/dashboard/admissions/{by_preset.id}/"))
    history = page_of(staff_client.get("/dashboard/history/"))
    rows = re.findall(r'<tr class="[^"]*">.*?</tr>', history, re.S)
    linked = {i for row in rows if model_href in row for i in detail_ids(row)}
    assert linked == {converted.id, denied.id}

    page = page_of(staff_client.get(f"/dashboard/models/{QWEN}/"))
    model = LanguageModel.objects.get(name=QWEN)
    assert f'href="/admin/profiles/languagemodel/{model.pk}/change/"' in page
    assert detail_ids(section(page, "Latest admissions")) == {converted.id, denied.id}
    assert detail_ids(section(page, "Latest denials")) == {denied.id}
    full = re.search(r'class="admissions-link" href="([^"]+)"', page).group(1)
    assert full == "/dashboard/history/?reason=%28catalog+Qwen2.5-7B-Instruct%29"
    assert detail_ids(page_of(staff_client.get(full))) == {converted.id, denied.id}

    admin_page = page_of(admin_client.get(f"/admin/profiles/languagemodel/{model.pk}/change/"))
    assert f'href="/dashboard/models/{QWEN}/">admissions and recent denials</a>' in admin_page
    assert f'href="{full}">full history</a>' in admin_page


def test_a_model_page_that_runs_out_of_time_links_to_the_full_history(staff_client, monkeypatch):
    from contextlib import contextmanager

    from mutations.audit import selectors

    searches = []

    @contextmanager
    def out_of_time(budget_ms):
        searches.append(budget_ms)
        raise selectors.OutOfTime("statement timeout")
        yield

    monkeypatch.setattr(selectors, "time_budget", out_of_time)
    page = page_of(staff_client.get(f"/dashboard/models/{QWEN}/"))
    assert "Not found within the page's time budget" in section(page, "Latest denials")
    assert "Not found within the page's time budget" in section(page, "Latest admissions")
    # one search, within the page's budget: the narrower lists do not search again what ran out
    assert len(searches) == 1 and 0 < searches[0] <= selectors.SEARCH_BUDGET_MS
    assert 'href="/dashboard/history/?reason=%28catalog+Qwen2.5-7B-Instruct%29">the full history</a>' in page


def test_a_model_page_cut_short_says_how_far_back_it_searched_and_links_to_older(staff_client, monkeypatch):
    """One budget for the page: the latest admissions are searched newest first; the denials and rehearsed
    denials among fewer than a page of them are picked from them, over the same time, without searching again."""
    from contextlib import contextmanager

    from mutations.audit import selectors

    now = timezone.now()
    mark = f"(catalog {QWEN})"
    denied = audit_row(decision="denied", reason=f"too large {mark}", created_at=now - timedelta(minutes=5))
    would_deny = audit_row(decision="audit-only", reason=f"would deny: too large {mark}",
                           created_at=now - timedelta(minutes=6))
    older = audit_row(decision="denied", reason=f"too large {mark}", created_at=now - timedelta(hours=3))
    real_budget, slices = selectors.time_budget, []

    @contextmanager
    def second_slice_out_of_time(budget_ms):
        slices.append(budget_ms)
        if len(slices) == 2:
            raise selectors.OutOfTime("statement timeout")
        with real_budget(budget_ms):
            yield

    monkeypatch.setattr(selectors, "time_budget", second_slice_out_of_time)
    page = page_of(staff_client.get(f"/dashboard/models/{QWEN}/"))
    assert len(slices) == 2 and slices[1] <= slices[0] <= selectors.SEARCH_BUDGET_MS  # one search, one budget
    assert detail_ids(section(page, "Latest admissions")) == {denied.id, would_deny.id}
    assert detail_ids(section(page, "Latest denials")) == {denied.id}
    assert detail_ids(section(page, "What enforce would deny (audit-only)")) == {would_deny.id}
    since = re.search(r"Searched back to (\S+ \S+) UTC: the search stopped there", page).group(1)
    searched_since = datetime.fromisoformat(since + "+00:00")
    assert now - timedelta(hours=1, seconds=1) <= searched_since <= timezone.now() - timedelta(hours=1)
    link = re.search(r'<a href="([^"]+)">Search older admissions</a>', page).group(1).replace("&amp;", "&")
    monkeypatch.setattr(selectors, "time_budget", real_budget)
    assert detail_ids(page_of(staff_client.get(link))) == {older.id}


def test_a_model_page_with_a_page_of_admissions_searches_its_denials_on_their_own(staff_client, monkeypatch):
    # What is asserted is which rows each list finds, not how fast: a loaded machine must not run out of the budget.
    monkeypatch.setattr("mutations.audit.selectors.SEARCH_BUDGET_MS", 60_000)
    now = timezone.now()
    mark = f"(catalog {QWEN})"
    for minutes in range(1, 12):  # more than a page of conversions, newer than the denial
        audit_row(reason=f"converted {mark}", created_at=now - timedelta(minutes=minutes))
    denied = audit_row(decision="denied", reason=f"too large {mark}", created_at=now - timedelta(hours=2))
    page = page_of(staff_client.get(f"/dashboard/models/{QWEN}/"))
    assert len(detail_ids(section(page, "Latest admissions"))) == 10
    assert detail_ids(section(page, "Latest denials")) == {denied.id}
    assert "Searched back to" not in page


def test_a_model_no_longer_in_the_catalog_still_has_a_page(staff_client):
    page = page_of(staff_client.get("/dashboard/models/gone-model-1B/"))
    assert "No model of this name is in the catalog now" in page
