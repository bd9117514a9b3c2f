"""The Django admin for presets, GPU models and namespace policies, and its Pod preview page."""

import pytest
from django.contrib.auth.models import User

from profiles.models import GpuModel, NamespacePolicy, Preset
from profiles.selectors import pod_yaml
from tests.support import pods

pytestmark = pytest.mark.django_db

CHANGELISTS = ["/admin/profiles/preset/", "/admin/profiles/gpumodel/", "/admin/profiles/namespacepolicy/"]
PREVIEW = "/admin/profiles/namespacepolicy/preview/"


def preset_form(**fields) -> dict:
    data = {
        "name": "custom", "description": "", "vgpu_memory_mib": "8192", "vgpu_cores_percent": "",
        "min_model_size_b": "", "max_model_size_b": "", "gpu_model": "", "cpu_request": "", "cpu_limit": "",
        "memory_request": "", "memory_limit": "", "enabled": "on",
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def policy_form(**fields) -> dict:
    data = {
        "namespace": "team-a", "description": "", "mode": "enforce", "default_preset": "", "max_vgpus_per_pod": "",
        "max_vgpu_memory_mib": "", "scheduler_name": "volcano", "scheduler_scope": "gpu-pods", "cpu_request": "",
        "cpu_limit": "", "memory_request": "", "memory_limit": "", "deny_privileged": "on",
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def form_errors(response) -> dict:
    assert response.status_code == 200, "a refused form is shown again with its errors"
    form = response.context["adminform"].form
    return {field: [str(e) for e in errors] for field, errors in form.errors.items()}


# --- who gets in ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", CHANGELISTS + [PREVIEW])
def test_anonymous_user_is_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_anonymous_post_changes_nothing(client):
    client.post("/admin/profiles/preset/add/", preset_form())
    assert not Preset.objects.filter(name="custom").exists()


@pytest.mark.parametrize("url", CHANGELISTS + [PREVIEW])
def test_non_staff_user_is_sent_to_the_login_page(client, reader, url):
    client.force_login(reader)
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_user_without_permissions_cannot_see_presets(client):
    client.force_login(User.objects.create_user("intern", password="pw", is_staff=True))
    assert client.get("/admin/profiles/preset/").status_code == 403


def test_staff_user_without_permissions_cannot_use_the_preview(client):
    client.force_login(User.objects.create_user("intern", password="pw", is_staff=True))
    assert client.get(PREVIEW).status_code == 403


@pytest.mark.parametrize("url", CHANGELISTS)
def test_operator_sees_each_list(staff_client, url):
    assert staff_client.get(url).status_code == 200


# --- list pages --------------------------------------------------------------------------------------
def test_preset_list_shows_memory_range_and_used_by_counts(staff_client):
    response = staff_client.get("/admin/profiles/preset/")
    html = response.content.decode()
    assert "23,552 MiB (23 GiB)" in html  # llm-7b, in the one memory format of every page
    assert "over 3B up to 8B" in html
    assert "default in policies" in html.lower() and "allowed in policies" in html.lower()
    default = next(p for p in response.context["cl"].result_list if p.name == "default")
    assert default.default_for_policies_count == 1  # the seeded * policy


def test_preset_list_search_finds_by_description(staff_client):
    response = staff_client.get("/admin/profiles/preset/", {"q": "Phi-4"})
    assert [p.name for p in response.context["cl"].result_list] == ["llm-14b"]


def test_preset_list_filters_disabled_presets(staff_client):
    Preset.objects.filter(name="llm-70b").update(enabled=False)
    response = staff_client.get("/admin/profiles/preset/", {"enabled__exact": "0"})
    assert [p.name for p in response.context["cl"].result_list] == ["llm-70b"]


def test_preset_list_is_ordered_by_memory(staff_client):
    results = staff_client.get("/admin/profiles/preset/").context["cl"].result_list
    memory = [p.vgpu_memory_mib for p in results]
    assert memory == sorted(memory)


def _changelist_queries(client, django_assert_num_queries, url: str, expected: int) -> None:
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200


@pytest.mark.parametrize(
    "url, add_rows",
    [
        ("/admin/profiles/preset/", lambda i: Preset.objects.create(name=f"extra-{i}", vgpu_memory_mib=1000 + i,
                                                                     gpu_model=GpuModel.objects.get(name="T4"))),
        ("/admin/profiles/gpumodel/", lambda i: GpuModel.objects.create(name=f"card-{i}", memory_mib=1, match="x")),
        ("/admin/profiles/namespacepolicy/", lambda i: NamespacePolicy.objects.create(
            namespace=f"team-{i}", default_preset=Preset.objects.get(name="llm-7b"))),
    ],
    ids=["presets", "gpu-models", "policies"],
)
def test_list_page_queries_do_not_grow_with_rows(staff_client, django_assert_num_queries, url, add_rows):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        staff_client.get(url)
    for i in range(10):
        add_rows(i)
        if url.endswith("namespacepolicy/"):
            NamespacePolicy.objects.get(namespace=f"team-{i}").allowed_presets.set(Preset.objects.all()[:2])
    _changelist_queries(staff_client, django_assert_num_queries, url, len(few))


# --- validation that says what to fix ------------------------------------------------------------------
def test_overlapping_range_is_refused_naming_the_other_preset(staff_client):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(min_model_size_b="6",
                                                                           max_model_size_b="10"))
    errors = form_errors(response)
    assert "llm-7b" in errors["max_model_size_b"][0] and "llm-14b" in errors["max_model_size_b"][0]
    assert not Preset.objects.filter(name="custom").exists()


def test_reversed_range_is_refused_once_on_the_field(staff_client):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(min_model_size_b="9",
                                                                           max_model_size_b="3"))
    errors = form_errors(response)
    assert list(errors) == ["max_model_size_b"] and "got 9B to 3B" in errors["max_model_size_b"][0]


def test_default_preset_that_is_disabled_is_refused(staff_client):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(is_default="on", enabled=None))
    assert "must be enabled" in form_errors(response)["enabled"][0]


def test_ticking_default_in_the_admin_moves_the_default(staff_client):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(is_default="on"))
    assert response.status_code == 302
    assert list(Preset.objects.filter(is_default=True).values_list("name", flat=True)) == ["custom"]


def test_policy_default_preset_outside_its_allowed_presets_is_refused(staff_client):
    allowed = Preset.objects.get(name="llm-7b").pk
    default = Preset.objects.get(name="llm-14b").pk
    response = staff_client.post("/admin/profiles/namespacepolicy/add/",
                                 {**policy_form(default_preset=str(default)), "allowed_presets": [str(allowed)]})
    assert "not among the allowed presets" in form_errors(response)["default_preset"][0]
    assert not NamespacePolicy.objects.filter(namespace="team-a").exists()


def test_policy_with_a_disabled_default_preset_is_refused(staff_client):
    Preset.objects.filter(name="llm-70b").update(enabled=False)
    response = staff_client.post("/admin/profiles/namespacepolicy/add/",
                                 policy_form(default_preset=str(Preset.objects.get(name="llm-70b").pk)))
    assert "disabled" in form_errors(response)["default_preset"][0]


def test_operator_saves_a_policy_with_allowed_presets(staff_client):
    allowed = [str(p.pk) for p in Preset.objects.filter(name__in=["llm-7b", "llm-14b"])]
    response = staff_client.post("/admin/profiles/namespacepolicy/add/",
                                 {**policy_form(namespace="team-*", mode="audit-only"), "allowed_presets": allowed})
    assert response.status_code == 302
    policy = NamespacePolicy.objects.get(namespace="team-*")
    assert policy.mode == "audit-only"
    assert sorted(policy.allowed_presets.values_list("name", flat=True)) == ["llm-14b", "llm-7b"]


def test_gpu_model_with_zero_memory_is_refused(staff_client):
    response = staff_client.post("/admin/profiles/gpumodel/add/",
                                 {"name": "B200", "memory_mib": "0", "match": "B200", "description": ""})
    assert "memory_mib" in form_errors(response)


def test_gpu_model_named_with_a_bidi_control_is_refused_with_the_character_named(staff_client):
    response = staff_client.post("/admin/profiles/gpumodel/add/",
                                 {"name": "A100\u202e08", "memory_mib": "81920", "match": "A100", "description": ""})
    assert "U+202E (RIGHT-TO-LEFT OVERRIDE) at position 5" in form_errors(response)["name"][0]
    assert not GpuModel.objects.filter(name="A100\u202e08").exists()


# --- deleting what is in use ---------------------------------------------------------------------------
def test_deleting_a_preset_in_use_shows_the_policies_and_keeps_it(staff_client):
    policy = NamespacePolicy.objects.create(namespace="team-a")
    policy.allowed_presets.add(Preset.objects.get(name="llm-7b"))
    url = f"/admin/profiles/preset/{Preset.objects.get(name='llm-7b').pk}/delete/"
    page = staff_client.get(url).content.decode()
    assert "namespace policy team-a" in page
    staff_client.post(url, {"post": "yes"})
    assert Preset.objects.filter(name="llm-7b").exists()


def test_deleting_the_default_preset_is_refused(staff_client):
    url = f"/admin/profiles/preset/{Preset.objects.get(name='default').pk}/delete/"
    staff_client.post(url, {"post": "yes"})
    assert Preset.objects.filter(name="default").exists()


def test_deleting_an_unused_preset_in_the_admin_removes_it(staff_client):
    url = f"/admin/profiles/preset/{Preset.objects.get(name='llm-70b').pk}/delete/"
    assert staff_client.post(url, {"post": "yes"}).status_code == 302
    assert not Preset.objects.filter(name="llm-70b").exists()


def test_bulk_delete_of_a_used_preset_is_refused(staff_client):
    ids = [str(p.pk) for p in Preset.objects.filter(name__in=["default", "llm-70b"])]
    staff_client.post("/admin/profiles/preset/", {"action": "delete_selected", "_selected_action": ids,
                                                  "post": "yes"})
    assert Preset.objects.filter(name__in=["default", "llm-70b"]).count() == 2


# --- the preview page ---------------------------------------------------------------------------------
def test_preview_page_shows_the_mutated_pod_patch_and_decision(staff_client):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})
    response = staff_client.post(PREVIEW, {"namespace": "team-a", "pod_yaml": pod_yaml(pod=pod)})
    assert response.status_code == 200
    preview = response.context["preview"]
    assert preview["decision"] == "mutated" and preview["preset"] == "llm-7b"
    html = response.content.decode()
    assert "volcano.sh/vgpu-memory: &#x27;23552&#x27;" in html or "volcano.sh/vgpu-memory: '23552'" in html
    assert "+    volcano-injector.io/applied-preset: llm-7b" in preview["diff"]
    assert '"op": "remove"' in preview["patch_text"]


def test_preview_page_shows_a_denial_and_its_reason(staff_client):
    NamespacePolicy.objects.create(namespace="team-a", max_vgpus_per_pod=1)
    pod = pods.vllm_deployment_pod(gpus="4")
    response = staff_client.post(PREVIEW, {"namespace": "team-a", "pod_yaml": pod_yaml(pod=pod)})
    preview = response.context["preview"]
    assert preview["decision"] == "denied" and "at most 1" in preview["reason"]


def test_preview_page_says_what_is_wrong_with_the_yaml(staff_client):
    response = staff_client.post(PREVIEW, {"namespace": "team-a", "pod_yaml": "kind: Deployment\nspec: {}\n"})
    assert "kind: Pod" in response.context["form"].errors["pod_yaml"][0]
    assert response.context["preview"] is None


def test_preview_action_opens_the_page_with_the_policy_namespace(staff_client):
    policy = NamespacePolicy.objects.create(namespace="team-a")
    response = staff_client.post("/admin/profiles/namespacepolicy/",
                                 {"action": "preview_pod_action", "_selected_action": [str(policy.pk)]})
    assert response.status_code == 302 and response["Location"] == f"{PREVIEW}?namespace=team-a"


def test_the_admin_login_locks_a_user_name_and_address_out_after_repeated_wrong_passwords(client, settings):
    """django-axes: 40 wrong passwords in 10 s followed by the right one logged in before."""
    User.objects.create_user("target", password="the-right-password", is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post("/admin/login/", {"username": "target", "password": "guess"})
        assert response.status_code == 200 and not response.wsgi_request.user.is_authenticated
    assert client.post("/admin/login/", {"username": "target", "password": "guess"}).status_code == 429
    response = client.post("/admin/login/", {"username": "target", "password": "the-right-password"})
    assert response.status_code == 429
    assert client.get("/admin/").status_code == 302  # still not logged in


def test_a_right_password_before_the_limit_logs_in_and_resets_the_count(client, settings):
    User.objects.create_user("target", password="the-right-password", is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/admin/login/", {"username": "target", "password": "guess"})
    response = client.post("/admin/login/", {"username": "target", "password": "the-right-password"})
    assert response.status_code == 302 and client.get("/admin/").status_code == 200


@pytest.mark.parametrize(("url", "labels"), [
    ("/admin/profiles/preset/add/", ["Memory per vGPU (MiB):", "Cores per vGPU (%):",
                                     "Smallest model size (billions of parameters):",
                                     "Largest model size (billions of parameters):", "GPU model:", "CPU request:"]),
    ("/admin/profiles/namespacepolicy/add/", ["Most vGPUs per Pod:", "Most memory per vGPU (MiB):",
                                              "Budget: vGPU memory (GiB):", "Default Volcano queue:"]),
    ("/admin/profiles/gpumodel/add/", ["Memory (MiB):"]),
    ("/admin/profiles/languagemodel/add/", ["Parameters (billions):", "KV heads:", "Native context (tokens):"]),
])
def test_admin_forms_label_each_field_in_words_with_its_unit(staff_client, url, labels):
    page = staff_client.get(url).content.decode()
    for label in labels:
        assert f">{label}</label>" in page, label
    for raw in ("Vgpu memory mib", "Min model size b", "Max vgpu memory mib", "Kv heads", "Params b"):
        assert raw not in page


@pytest.mark.parametrize("mib", [str(10**12), str(200 * 1024)], ids=["10^12", "above-every-card"])
def test_preset_and_policy_memory_above_every_known_card_is_refused_on_the_field(staff_client, mib):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(vgpu_memory_mib=mib))
    assert "vgpu_memory_mib" in form_errors(response)
    assert not Preset.objects.filter(name="custom").exists()
    response = staff_client.post("/admin/profiles/namespacepolicy/add/", policy_form(max_vgpu_memory_mib=mib))
    assert "max_vgpu_memory_mib" in form_errors(response)
    assert not NamespacePolicy.objects.filter(namespace="team-a").exists()
