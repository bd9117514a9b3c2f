"""Every dashboard page on a phone (390x844) and a laptop (1440x900): no sideways page scrolling, the reason
of each admission readable, links from a row to its policy and back, audit-only rows shown as "would", and
no serious or critical accessibility violation (axe-core, bundled by axe-playwright-python: offline)."""

import pytest
import yaml
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import Permission
from django.core.management import call_command
from PIL import Image

from mutations.models import AdmissionAudit
from profiles.models import GpuModel, LanguageModel, NamespacePolicy, ObjectChange, Preset
from tests.support import pods

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
PASSWORD = "a-long-password-for-tests-only"
VIEWPORTS = [pytest.param((390, 844), id="phone"), pytest.param((1440, 900), id="laptop")]
BAD_IMPACTS = ("serious", "critical")


def assert_not_blank(path, width):
    """A real page has text, badges and colours: hundreds of distinct pixel colours, not one or two."""
    with Image.open(path) as image:
        assert image.width >= width and image.height >= 400
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 100, f"{path} looks blank ({len(colours)} colours)"


@pytest.fixture
def admissions(django_user_model, post_review):
    """Staff, two policies (team-* enforces limits, lab-* is audit-only), history, and four real admissions."""
    user = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_admissionaudit", "view_namespacepolicy"]))
    team = NamespacePolicy.objects.create(namespace="team-*", max_vgpu_memory_mib=49152, max_vgpus_per_pod=2)
    team.allowed_presets.set(Preset.objects.filter(name__in=["llm-1.5b", "llm-7b", "llm-14b", "default"]))
    NamespacePolicy.objects.create(namespace="lab-*", mode="audit-only", max_vgpus_per_pod=2)
    call_command("fill_audit", "--rows", "300", "--days", "7", "--seed", "7")
    rows = {}
    for name, pod, namespace in [
        ("converted", pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"}), "ml-prod"),
        ("denied", pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "20B"}), "team-a"),
        ("would-deny", pods.ray_worker_pod(), "lab-a"),
        ("would-apply", pods.vllm_deployment_pod(), "lab-a"),
    ]:
        pod["metadata"]["namespace"] = namespace
        pod["metadata"]["generateName"] = f"{name}-7d9c8b5d6f-"
        post_review(pods.review(pod, namespace=namespace))
        rows[name] = AdmissionAudit.objects.filter(generate_name=f"{name}-7d9c8b5d6f-").get()
    assert [rows[n].decision_label for n in rows] == ["mutated", "denied", "would deny", "would apply"]
    return rows


def log_in(page, base_url):
    page.goto(f"{base_url}/")
    assert "/admin/login/" in page.url  # the root sends a visitor to log in, then to the dashboard
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base_url}/dashboard/")


def check_page(page, name, width):
    """No sideways page scrolling, no serious accessibility violation, a screenshot that is not blank."""
    overflow = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    widest = page.evaluate("""[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right >
        window.innerWidth + 1).slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)""")
    assert overflow[0] <= overflow[1], f"{name} at {width} px is {overflow[0]} px wide: {widest}"
    results = Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in BAD_IMPACTS]
    assert not bad, f"{name} at {width} px:\n" + "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']}: " + "; ".join(n["html"][:160] for n in v["nodes"][:4]) for v in bad)
    path = ARTIFACTS / f"layout-{name}-{width}.png"
    page.screenshot(path=path, full_page=True)
    assert_not_blank(path, width)


def visible_in_viewport(locator, width):
    box = locator.bounding_box()
    return box is not None and box["width"] > 0 and 0 <= box["x"] < width and box["x"] + min(box["width"], 80) <= width


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_every_page_fits_the_screen_and_passes_axe(admissions, live_server, browser_page, viewport):
    width, height = viewport
    page = browser_page(width, height)
    base = live_server.url
    log_in(page, base)
    check_page(page, "overview", width)
    assert "would deny" in page.locator(".cards").inner_text().lower()

    page.goto(f"{base}/dashboard/history/")
    check_page(page, "history", width)
    denied_row = page.locator(f"table.history tr:has(a[href='{admissions['denied'].get_absolute_url()}'])")
    reason = denied_row.locator("td.reason-cell")
    assert "allows at most 49152 MiB per vGPU" in reason.inner_text()
    assert visible_in_viewport(reason, width), "the reason is on screen without scrolling sideways"

    for name in ("converted", "denied", "would-deny", "would-apply"):
        page.goto(f"{base}/dashboard/admissions/{admissions[name].id}/")
        check_page(page, f"detail-{name}", width)

    page.goto(f"{base}/dashboard/policies/team-*/")
    check_page(page, "policy", width)
    page.goto(f"{base}/dashboard/rehearsal/?namespace=lab-a")
    check_page(page, "rehearsal", width)
    assert "1 rule would deny 1 Pod" in page.locator(".rules h2").inner_text()
    page.goto(f"{base}/dashboard/models/Qwen2.5-7B-Instruct/")  # the would-apply Pod serves it
    check_page(page, "model", width)
    assert page.locator(f"a[href^='/dashboard/admissions/{admissions['would-apply'].id}/']").count() >= 1


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_a_denied_row_links_to_its_policy_and_back_and_explains_itself(admissions, live_server, browser_page,
                                                                        viewport):
    width, height = viewport
    page = browser_page(width, height)
    log_in(page, live_server.url)
    denied = admissions["denied"]
    page.goto(f"{live_server.url}/dashboard/admissions/{denied.id}/")
    why = page.locator(".why")
    assert "model-size 20B" in why.locator(".asked").inner_text()
    assert "estimated for a 20B fp16 model" in why.locator(".origin").inner_text()
    assert "'llm-32b' serves this model size" in why.locator(".fixes").inner_text()
    why.locator("a.policy-link").first.click()
    page.wait_for_url("**/dashboard/policies/team-*/")
    assert "49152 MiB" in page.locator("main").inner_text()
    page.locator(f"a[href='{denied.get_absolute_url()}']").first.click()
    page.wait_for_url(lambda url: url.endswith(denied.get_absolute_url()))


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_audit_only_rows_are_shown_as_what_enforce_would_do(admissions, live_server, browser_page, viewport):
    width, height = viewport
    page = browser_page(width, height)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/dashboard/history/?namespace=lab-a")
    badges = sorted(page.locator("table.history .badge").all_inner_texts())
    assert badges == ["would apply", "would deny"]
    page.goto(f"{live_server.url}/dashboard/admissions/{admissions['would-apply'].id}/")
    main = page.locator("main").inner_text()
    assert "What enforce would grant" in main and "granted" not in main.replace("would grant", "")
    page.goto(f"{live_server.url}/dashboard/admissions/{admissions['would-deny'].id}/")
    assert "Why enforce would deny it" in page.locator("main").inner_text()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_preview_reports_every_violation_on_any_screen(admissions, django_user_model, live_server,
                                                           browser_page, viewport):
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    width, height = viewport
    page = browser_page(width, height)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/profiles/namespacepolicy/preview/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/profiles/namespacepolicy/preview/")
    pod = pods.ray_worker_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    page.fill("#id_namespace", "team-a")
    page.fill("#id_pod_yaml", yaml.safe_dump(pod))
    page.click("input[type=submit][value=Preview]")
    explanation = page.locator("#pod-preview-explanation")
    assert "2 rules broken" in explanation.inner_text()
    check_page(page, "preview", width)


def test_the_dashboard_follows_the_system_dark_mode(admissions, live_server, browser_page):
    page = browser_page(1440, 900, color_scheme="dark")
    log_in(page, live_server.url)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 24, 32)"
    page.goto(f"{live_server.url}/dashboard/admissions/{admissions['denied'].id}/")
    check_page(page, "detail-denied-dark", 1440)


def page_overflow(page) -> list[str]:
    """What sticks out of the viewport sideways (empty when nothing does), with the page's own width first."""
    return page.evaluate("""(() => {
        const wide = document.documentElement.scrollWidth > window.innerWidth
            ? [`page ${document.documentElement.scrollWidth} px`] : [];
        return wide.concat([...document.querySelectorAll('body *')].filter(e => {
            const box = e.getBoundingClientRect();
            return box.width > 0 && box.right > window.innerWidth + 1 && !e.closest('.table-scroll, .results');
        }).slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id));
    })()""")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_history_shows_its_key_columns_without_scrolling_and_labels_every_value_on_a_phone(
        admissions, live_server, browser_page, viewport):
    width, height = viewport
    page = browser_page(width, height)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/dashboard/history/")
    assert page_overflow(page) == []
    scroll = page.evaluate("(e => [e.scrollWidth, e.clientWidth])(document.querySelector('.table-scroll'))")
    assert scroll[0] <= scroll[1], f"the history table is {scroll[0]} px in a {scroll[1]} px box at {width} px"
    row = page.locator(f"table.history tr:has(a[href='{admissions['converted'].get_absolute_url()}'])")
    for cell in ("Time (UTC)", "Decision", "Pod", "vGPUs × memory"):
        assert visible_in_viewport(row.locator(f"td[data-label='{cell}']"), width), cell
    assert "1 ×" in row.locator("td[data-label='vGPUs × memory']").inner_text()
    details = row.locator("td.details-cell")
    assert not details.locator("dl").is_visible()
    details.locator("summary").click()
    assert "ReplicaSet/" in details.locator("dl").inner_text()
    assert page_overflow(page) == []
    if width < 700:  # a card: each value beside its label
        labels = row.locator("td[data-label]").evaluate_all(
            "cells => cells.map(c => getComputedStyle(c, '::before').content)")
        assert labels[:4] == ['"Time (UTC)"', '"Decision"', '"Namespace"', '"Pod"']
    else:
        assert row.locator("td[data-label='Reason']").bounding_box()["width"] >= 200


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_admin_change_forms_and_the_model_list_fit_the_screen(admissions, django_user_model, live_server,
                                                             browser_page, viewport):
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    width, height = viewport
    page = browser_page(width, height)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    model = LanguageModel.objects.order_by("name").first()
    for name, path in [
        ("preset", f"/admin/profiles/preset/{Preset.objects.get(name='llm-7b').pk}/change/"),
        ("policy", f"/admin/profiles/namespacepolicy/{NamespacePolicy.objects.get(namespace='team-*').pk}/change/"),
        ("gpu-model", f"/admin/profiles/gpumodel/{GpuModel.objects.order_by('name').first().pk}/change/"),
        ("language-model", f"/admin/profiles/languagemodel/{model.pk}/change/"),
        ("preset-add", "/admin/profiles/preset/add/"),
    ]:
        page.goto(f"{live_server.url}{path}")
        assert page_overflow(page) == [], f"{name} at {width} px"
        page.screenshot(path=ARTIFACTS / f"layout-admin-{name}-{width}.png", full_page=True)
    # The restore's confirmation: what it changes, its impact, the reason.
    preset = Preset.objects.get(name="llm-7b")
    preset.vgpu_memory_mib += 1024
    preset.save()
    change = ObjectChange.objects.latest("id")
    page.goto(f"{live_server.url}/admin/profiles/objectchange/{change.pk}/restore/?state=before")
    assert page.locator("table.restore-diff tr.changed").count() == 1 and page.locator("#id_reason").is_visible()
    assert page_overflow(page) == [], f"restore at {width} px"
    page.screenshot(path=ARTIFACTS / f"layout-admin-restore-{width}.png", full_page=True)
    page.goto(f"{live_server.url}/admin/profiles/languagemodel/")
    assert page_overflow(page) == []
    page.screenshot(path=ARTIFACTS / f"layout-admin-model-list-{width}.png", full_page=True)
    header = page.locator("#result_list th.column-context")
    cell = page.locator("#result_list td.field-context").first
    # the context column is whole: its header and values are not cut (no ellipsis, nothing clipped)
    whole = "e => e.scrollWidth <= e.clientWidth"
    assert cell.evaluate(whole) and header.evaluate(whole)
    assert f"{model.max_context:,}" in cell.inner_text()
    if width >= 1440:  # every column on screen, none behind the list's own scrolling
        results = page.evaluate("(e => [e.scrollWidth, e.clientWidth])(document.querySelector('.results'))")
        assert results[0] <= results[1], f"the model list is {results[0]} px in a {results[1]} px box"
