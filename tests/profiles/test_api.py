"""/api/v1/presets/, /api/v1/gpu-models/, /api/v1/namespace-policies/ on PostgreSQL."""

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from rest_framework.test import APIClient

from profiles.models import ConfigVersion, GpuModel, NamespacePolicy, Preset
from profiles.services import api_token_issue

pytestmark = pytest.mark.django_db

PRESETS = "/api/v1/presets/"
GPU_MODELS = "/api/v1/gpu-models/"
POLICIES = "/api/v1/namespace-policies/"


def preset_url(name: str) -> str:
    return f"{PRESETS}{Preset.objects.get(name=name).pk}/"


def policy_url(namespace: str) -> str:
    return f"{POLICIES}{NamespacePolicy.objects.get(namespace=namespace).pk}/"


def new_preset(**fields) -> dict:
    return {"name": "custom", "vgpu_memory_mib": 8192, **fields}


# --- who may do what ------------------------------------------------------------------------------
@pytest.mark.parametrize("url", [PRESETS, GPU_MODELS, POLICIES])
def test_anonymous_user_cannot_list(anonymous_api, url):
    assert anonymous_api.get(url).status_code == 401


def test_anonymous_user_cannot_create_a_preset(anonymous_api):
    assert anonymous_api.post(PRESETS, new_preset(), format="json").status_code == 401
    assert not Preset.objects.filter(name="custom").exists()


@pytest.mark.parametrize("url", [PRESETS, GPU_MODELS, POLICIES])
def test_authenticated_user_without_permissions_can_read(reader_api, url):
    response = reader_api.get(url)
    assert response.status_code == 200
    assert response.json()["count"] >= 1


def test_authenticated_user_without_permission_cannot_create_a_preset(reader_api):
    assert reader_api.post(PRESETS, new_preset(), format="json").status_code == 403
    assert not Preset.objects.filter(name="custom").exists()


def test_authenticated_user_without_permission_cannot_change_a_policy(reader_api):
    response = reader_api.patch(policy_url("*"), {"mode": "off"}, format="json")
    assert response.status_code == 403
    assert NamespacePolicy.objects.get(namespace="*").mode == "enforce"


def test_authenticated_user_without_permission_cannot_delete_a_gpu_model(reader_api):
    response = reader_api.delete(f"{GPU_MODELS}{GpuModel.objects.get(name='T4').pk}/")
    assert response.status_code == 403
    assert GpuModel.objects.filter(name="T4").exists()


def test_user_with_only_add_permission_cannot_delete(reader, reader_api):
    from django.contrib.auth.models import Permission

    reader.user_permissions.add(Permission.objects.get(codename="add_preset"))
    assert reader_api.post(PRESETS, new_preset(), format="json").status_code == 201
    assert reader_api.delete(preset_url("custom")).status_code == 403
    assert Preset.objects.filter(name="custom").exists()


def test_operator_creates_a_preset(operator_api):
    response = operator_api.post(PRESETS, new_preset(vgpu_cores_percent=30, gpu_model="A10"), format="json")
    assert response.status_code == 201, response.json()
    preset = Preset.objects.get(name="custom")
    assert (preset.vgpu_memory_mib, preset.vgpu_cores_percent, preset.gpu_model.name) == (8192, 30, "A10")


def test_create_answers_with_the_row_as_a_get_shows_it(operator_api):
    created = operator_api.post(PRESETS, new_preset(gpu_model="A10"), format="json").json()
    assert created == operator_api.get(preset_url("custom")).json()


def test_token_authentication_lets_a_script_write(operator):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(username=operator.username)[0]}")
    assert client.post(PRESETS, new_preset(), format="json").status_code == 201


def test_a_wrong_token_is_refused():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")
    assert client.get(PRESETS).status_code == 401


def login_request() -> HttpRequest:
    """The request django-axes needs to see for a login (it counts failures per user name and address)."""
    request = HttpRequest()
    request.META["REMOTE_ADDR"] = "127.0.0.1"
    return request


def test_session_login_reads_the_api_in_a_browser(client):
    User.objects.create_user("browser", password="pw-browser")
    assert client.login(request=login_request(), username="browser", password="pw-browser")
    assert client.get(PRESETS).status_code == 200


def test_session_write_needs_the_csrf_token(operator):
    client = APIClient(enforce_csrf_checks=True)
    client.login(request=login_request(), username="operator", password="pw-operator")
    assert client.post(PRESETS, new_preset(), format="json").status_code == 403
    assert not Preset.objects.filter(name="custom").exists()


# --- list, filter, order, page -------------------------------------------------------------------
def test_presets_list_is_paginated(reader_api):
    body = reader_api.get(PRESETS, {"page_size": 2}).json()
    assert body["count"] == Preset.objects.count() and len(body["results"]) == 2 and body["next"]


def test_presets_filter_by_model_size_finds_the_preset_whose_range_holds_it(reader_api):
    names = [p["name"] for p in reader_api.get(PRESETS, {"model_size": 7}).json()["results"]]
    assert names == ["llm-7b"]


def test_presets_filter_by_model_size_excludes_the_lower_bound(reader_api):
    names = [p["name"] for p in reader_api.get(PRESETS, {"model_size": 8}).json()["results"]]
    assert names == ["llm-7b"]  # (3, 8] holds 8; (8, 14] does not


def test_presets_filter_by_gpu_model(reader_api, operator_api):
    operator_api.post(PRESETS, new_preset(gpu_model="T4"), format="json")
    names = [p["name"] for p in reader_api.get(PRESETS, {"gpu_model": "t4"}).json()["results"]]
    assert names == ["custom"]


def test_presets_order_by_memory_descending(reader_api):
    memory = [p["vgpu_memory_mib"] for p in reader_api.get(PRESETS, {"ordering": "-vgpu_memory_mib"}).json()["results"]]
    assert memory == sorted(memory, reverse=True)


def test_presets_search_matches_the_description(reader_api):
    names = [p["name"] for p in reader_api.get(PRESETS, {"search": "Phi-4"}).json()["results"]]
    assert names == ["llm-14b"]


def test_a_bad_filter_value_is_a_400_naming_the_filter(reader_api):
    response = reader_api.get(PRESETS, {"model_size": "seven"})
    assert response.status_code == 400 and "model_size" in response.json()


def test_preset_list_shows_how_many_policies_use_it(reader_api):
    default = next(p for p in reader_api.get(PRESETS).json()["results"] if p["name"] == "default")
    assert default["default_for_policies_count"] == 1


def test_gpu_models_list_shows_memory_and_used_by_count(reader_api, operator_api):
    operator_api.post(PRESETS, new_preset(gpu_model="A10"), format="json")
    row = reader_api.get(GPU_MODELS, {"name": "a10"}).json()["results"][0]
    assert (row["memory_mib"], row["presets_count"]) == (23028, 1)


def test_policies_filter_applies_to_picks_the_exact_policy_over_patterns(reader_api, operator_api):
    for namespace in ("team-*", "team-a"):
        assert operator_api.post(POLICIES, {"namespace": namespace}, format="json").status_code == 201
    rows = reader_api.get(POLICIES, {"applies_to": "team-a"}).json()["results"]
    assert [r["namespace"] for r in rows] == ["team-a"]


def test_policies_filter_applies_to_picks_the_longer_pattern(reader_api, operator_api):
    for namespace in ("team-*", "team-ml-*"):
        operator_api.post(POLICIES, {"namespace": namespace}, format="json")
    rows = reader_api.get(POLICIES, {"applies_to": "team-ml-prod"}).json()["results"]
    assert [r["namespace"] for r in rows] == ["team-ml-*"]


def test_policies_filter_allows_includes_policies_without_a_list(reader_api, operator_api):
    operator_api.post(POLICIES, {"namespace": "team-a", "allowed_presets": ["llm-7b"]}, format="json")
    operator_api.post(POLICIES, {"namespace": "team-b", "allowed_presets": ["llm-14b"]}, format="json")
    rows = reader_api.get(POLICIES, {"allows": "llm-7b"}).json()["results"]
    assert sorted(r["namespace"] for r in rows) == ["*", "team-a"]


# --- validation is a 400 with the field named, never a 500 ----------------------------------------
@pytest.mark.parametrize(
    "fields, field",
    [
        ({"name": "Not A Slug"}, "name"),
        ({"name": "default"}, "name"),
        ({"vgpu_memory_mib": 0}, "vgpu_memory_mib"),
        ({"vgpu_cores_percent": 101}, "vgpu_cores_percent"),
        ({"min_model_size_b": 100, "max_model_size_b": 90}, "max_model_size_b"),
        ({"min_model_size_b": -1, "max_model_size_b": 0.5}, "min_model_size_b"),
        ({"gpu_model": "B200"}, "gpu_model"),
        ({"gpu_model": "T4", "vgpu_memory_mib": 16384}, "vgpu_memory_mib"),
        ({"cpu_request": "lots"}, "cpu_request"),
        ({"cpu_request": "4", "cpu_limit": "2"}, "cpu_request"),
        ({"memory_request": "64Gi", "memory_limit": "32Gi"}, "memory_request"),
        ({"is_default": True, "enabled": False}, "enabled"),
    ],
    ids=["slug", "duplicate-name", "zero-memory", "cores-over-100", "range-reversed", "negative-size",
         "unknown-gpu-model", "memory-above-card", "cpu-not-quantity", "cpu-request-above-limit",
         "memory-request-above-limit", "default-disabled"],
)
def test_invalid_preset_is_a_400_naming_the_field(operator_api, fields, field):
    response = operator_api.post(PRESETS, new_preset(**fields), format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Preset.objects.filter(name=fields.get("name", "custom")).exclude(name="default").exists()


def test_overlapping_range_is_refused_naming_the_preset_it_overlaps(operator_api):
    response = operator_api.post(PRESETS, new_preset(min_model_size_b=6, max_model_size_b=10), format="json")
    assert response.status_code == 400
    message = response.json()["max_model_size_b"][0]
    assert "llm-7b" in message and "llm-14b" in message


def test_adjacent_ranges_do_not_overlap(operator_api):
    operator_api.patch(preset_url("llm-70b"), {"max_model_size_b": 70}, format="json")
    response = operator_api.post(PRESETS, new_preset(min_model_size_b=70, max_model_size_b=120), format="json")
    assert response.status_code == 201, response.json()


def test_a_disabled_preset_may_overlap(operator_api):
    response = operator_api.post(PRESETS, new_preset(min_model_size_b=6, max_model_size_b=10, enabled=False),
                                 format="json")
    assert response.status_code == 201


def test_enabling_an_overlapping_preset_is_refused(operator_api):
    operator_api.post(PRESETS, new_preset(min_model_size_b=6, max_model_size_b=10, enabled=False), format="json")
    response = operator_api.patch(preset_url("custom"), {"enabled": True}, format="json")
    assert response.status_code == 400 and "max_model_size_b" in response.json()
    assert Preset.objects.get(name="custom").enabled is False


def test_partial_update_checks_the_range_against_the_stored_bound(operator_api):
    response = operator_api.patch(preset_url("llm-7b"), {"max_model_size_b": 2}, format="json")
    assert response.status_code == 400 and "max_model_size_b" in response.json()


def test_making_a_preset_the_default_moves_the_default(operator_api):
    response = operator_api.post(PRESETS, new_preset(is_default=True), format="json")
    assert response.status_code == 201, response.json()
    assert list(Preset.objects.filter(is_default=True).values_list("name", flat=True)) == ["custom"]


def test_unsetting_the_only_default_is_refused(operator_api):
    response = operator_api.patch(preset_url("default"), {"is_default": False}, format="json")
    assert response.status_code == 400 and "is_default" in response.json()
    assert Preset.objects.get(name="default").is_default


def test_disabling_the_default_preset_is_refused(operator_api):
    response = operator_api.patch(preset_url("default"), {"enabled": False}, format="json")
    assert response.status_code == 400 and "enabled" in response.json()


def test_disabling_a_policy_default_preset_is_refused_naming_the_policy(operator_api):
    operator_api.post(POLICIES, {"namespace": "team-a", "default_preset": "llm-7b"}, format="json")
    response = operator_api.patch(preset_url("llm-7b"), {"enabled": False}, format="json")
    assert response.status_code == 400 and "team-a" in response.json()["enabled"][0]


def test_deleting_a_preset_a_policy_allows_is_refused_naming_the_policy(operator_api):
    operator_api.post(POLICIES, {"namespace": "team-a", "allowed_presets": ["llm-7b"]}, format="json")
    response = operator_api.delete(preset_url("llm-7b"))
    assert response.status_code == 400 and "team-a" in response.json()["detail"]
    assert Preset.objects.filter(name="llm-7b").exists()


def test_deleting_a_policy_default_preset_is_refused_naming_the_policy(operator_api):
    operator_api.post(POLICIES, {"namespace": "team-b", "default_preset": "llm-14b"}, format="json")
    response = operator_api.delete(preset_url("llm-14b"))
    assert response.status_code == 400 and "team-b" in response.json()["detail"]


def test_deleting_an_unused_preset_removes_it(operator_api):
    assert operator_api.delete(preset_url("llm-70b")).status_code == 204
    assert not Preset.objects.filter(name="llm-70b").exists()


def test_deleting_a_gpu_model_a_preset_uses_is_refused_naming_the_preset(operator_api):
    operator_api.post(PRESETS, new_preset(gpu_model="L40S"), format="json")
    response = operator_api.delete(f"{GPU_MODELS}{GpuModel.objects.get(name='L40S').pk}/")
    assert response.status_code == 400 and "custom" in response.json()["detail"]


def test_shrinking_a_gpu_model_below_a_preset_is_refused(operator_api):
    operator_api.post(PRESETS, new_preset(gpu_model="L40S", vgpu_memory_mib=40000), format="json")
    response = operator_api.patch(f"{GPU_MODELS}{GpuModel.objects.get(name='L40S').pk}/", {"memory_mib": 30000},
                                  format="json")
    assert response.status_code == 400 and "custom" in response.json()["memory_mib"][0]


@pytest.mark.parametrize(
    "fields, field",
    [({"name": "T4", "memory_mib": 1, "match": "T4"}, "name"),
     ({"name": "B200", "memory_mib": 0, "match": "B200"}, "memory_mib"),
     ({"name": "B200", "memory_mib": 184320, "match": "B200,H100"}, "match")],
    ids=["duplicate", "zero-memory", "comma-in-match"],
)
def test_invalid_gpu_model_is_a_400_naming_the_field(operator_api, fields, field):
    response = operator_api.post(GPU_MODELS, fields, format="json")
    assert response.status_code == 400 and field in response.json()


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"namespace": "Team_A"}, "namespace"),
        ({"namespace": "*"}, "namespace"),
        ({"mode": "sometimes"}, "mode"),
        ({"scheduler_scope": "some-pods"}, "scheduler_scope"),
        ({"max_vgpus_per_pod": 0}, "max_vgpus_per_pod"),
        ({"default_preset": "nope"}, "default_preset"),
        ({"default_preset": "llm-14b", "allowed_presets": ["llm-7b"]}, "default_preset"),
        ({"default_preset": "llm-14b", "max_vgpu_memory_mib": 16384}, "default_preset"),
        ({"cpu_request": "2", "cpu_limit": "1"}, "cpu_request"),
    ],
    ids=["bad-name", "duplicate", "mode", "scope", "zero-vgpus", "unknown-preset", "default-not-allowed",
         "default-above-cap", "request-above-limit"],
)
def test_invalid_policy_is_a_400_naming_the_field(operator_api, fields, field):
    response = operator_api.post(POLICIES, {"namespace": "team-a", **fields}, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_policy_with_a_disabled_default_preset_is_refused(operator_api):
    operator_api.post(PRESETS, new_preset(enabled=False), format="json")
    response = operator_api.post(POLICIES, {"namespace": "team-a", "default_preset": "custom"}, format="json")
    assert response.status_code == 400 and "disabled" in response.json()["default_preset"][0]


def test_narrowing_allowed_presets_below_the_stored_default_is_refused(operator_api):
    operator_api.post(POLICIES, {"namespace": "team-a", "default_preset": "llm-7b"}, format="json")
    response = operator_api.patch(policy_url("team-a"), {"allowed_presets": ["llm-14b"]}, format="json")
    assert response.status_code == 400 and "default_preset" in response.json()
    assert not NamespacePolicy.objects.get(namespace="team-a").allowed_presets.exists()


def test_operator_creates_a_policy_with_every_setting(operator_api):
    body = {
        "namespace": "team-*", "mode": "audit-only", "default_preset": "llm-7b",
        "allowed_presets": ["llm-7b", "llm-14b"], "max_vgpus_per_pod": 2, "max_vgpu_memory_mib": 40960,
        "scheduler_name": "volcano", "scheduler_scope": "all-pods", "cpu_request": "2", "cpu_limit": "4",
        "memory_request": "16Gi", "memory_limit": "64Gi", "deny_privileged": False,
    }
    response = operator_api.post(POLICIES, body, format="json")
    assert response.status_code == 201, response.json()
    stored = operator_api.get(policy_url("team-*")).json()
    stored["allowed_presets"].sort()
    body["allowed_presets"].sort()
    assert {k: stored[k] for k in body} == body and stored["is_pattern"] is True


def test_every_write_raises_the_configuration_version(operator_api, django_capture_on_commit_callbacks):
    before = ConfigVersion.objects.get(pk=1).version
    with django_capture_on_commit_callbacks(execute=True):
        operator_api.patch(preset_url("llm-7b"), {"vgpu_cores_percent": 40}, format="json")
    assert ConfigVersion.objects.get(pk=1).version > before


def test_too_many_bad_tokens_from_one_address_are_answered_429(settings, operator):
    from django.core.cache import cache

    cache.clear()
    settings.INJECTOR_API_BAD_TOKENS_PER_MINUTE = 3
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token vi_guess")
    assert [client.get(PRESETS).status_code for _ in range(3)] == [401, 401, 401]
    assert client.get(PRESETS).status_code == 429
    for start in ("vi_other", "xx_", "vi_guess-again"):  # a new start for each guess gains nothing
        client.credentials(HTTP_AUTHORIZATION=f"Token {start}")
        assert client.get(PRESETS).status_code == 429
    cache.clear()


def test_bad_tokens_from_one_address_do_not_lock_out_another_clients_valid_token(settings, operator):
    """Clients behind one address (a NAT, a proxy): a guesser, or a script with a revoked secret, is braked
    alone; a valid token from the same address still works."""
    from django.core.cache import cache

    cache.clear()
    settings.INJECTOR_API_BAD_TOKENS_PER_MINUTE = 3
    valid = api_token_issue(username=operator.username)[0]
    other = api_token_issue(username=operator.username)[0]
    guesser, wrong_secret, script = APIClient(), APIClient(), APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Token vi_guess")
    wrong_secret.credentials(HTTP_AUTHORIZATION=f"Token {other[:12]}not-the-secret")
    script.credentials(HTTP_AUTHORIZATION=f"Token {valid}")
    for client in (guesser, wrong_secret):
        assert [client.get(PRESETS).status_code for _ in range(4)] == [401, 401, 401, 429]
    response = wrong_secret.get(PRESETS)
    assert response.status_code == 429 and f"starting {other[:12]}" in response.json()["detail"]
    assert script.get(PRESETS).status_code == 200
    cache.clear()


# --- names people read: printable characters only --------------------------------------------------------
LOOKALIKES = [
    pytest.param("A100\u202e08-MXS", "U+202E (RIGHT-TO-LEFT OVERRIDE)", id="bidi override"),
    pytest.param("A\u200b100", "U+200B (ZERO WIDTH SPACE)", id="zero width space"),
    pytest.param("A100\u3164", "U+3164 (HANGUL FILLER)", id="an invisible letter"),
    pytest.param("A100\u00a0SXM", "U+00A0 (NO-BREAK SPACE)", id="a space that is not a space"),
    pytest.param("A100\nSXM", "U+000A (a control character)", id="a control character"),
]


@pytest.mark.parametrize("name, named", LOOKALIKES)
def test_a_gpu_model_name_with_a_bidi_control_or_an_invisible_character_is_a_400_naming_it(operator_api, name,
                                                                                          named):
    response = operator_api.post(GPU_MODELS, {"name": name, "memory_mib": 81920, "match": "A100"}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"name"}
    assert response.json()["name"][0].startswith(f"A GPU model's name may hold printable characters only: {named} at")
    assert not GpuModel.objects.filter(name=name).exists()


def test_a_card_name_substring_or_scheduler_name_with_a_zero_width_character_is_a_400_naming_it(operator_api):
    response = operator_api.post(GPU_MODELS, {"name": "B300", "memory_mib": 1024, "match": "B\u200d300"},
                                 format="json")
    assert response.status_code == 400 and "U+200D (ZERO WIDTH JOINER)" in response.json()["match"][0]
    response = operator_api.post(POLICIES, {"namespace": "team-z", "scheduler_name": "volcano\u2066"}, format="json")
    assert response.status_code == 400 and "U+2066 (LEFT-TO-RIGHT ISOLATE)" in response.json()["scheduler_name"][0]


def test_names_in_other_scripts_are_accepted(operator_api):
    response = operator_api.post(GPU_MODELS, {"name": "昇腾-910B", "memory_mib": 65536, "match": "910B"}, format="json")
    assert response.status_code == 201, response.json()


# --- memory bounded by the largest known card, and a sane maximum ---------------------------------------
@pytest.mark.parametrize("mib", [10**12, 2**20 + 1, 200 * 1024], ids=["10^12", "above-1-TiB", "above-every-card"])
def test_preset_memory_above_every_known_card_is_a_400_naming_the_field(operator_api, mib):
    largest = GpuModel.objects.order_by("-memory_mib").first()
    response = operator_api.post(PRESETS, new_preset(vgpu_memory_mib=mib), format="json")
    assert response.status_code == 400
    messages = " ".join(response.json()["vgpu_memory_mib"])
    assert f"{largest.memory_mib:,} MiB" in messages or "At most 1,048,576 MiB" in messages, messages
    assert not Preset.objects.filter(name="custom").exists()


@pytest.mark.parametrize("mib", [10**12, 2**20 + 1, 200 * 1024], ids=["10^12", "above-1-TiB", "above-every-card"])
def test_policy_memory_cap_above_every_known_card_is_a_400_naming_the_field(operator_api, mib):
    response = operator_api.post(POLICIES, {"namespace": "team-a", "max_vgpu_memory_mib": mib}, format="json")
    assert response.status_code == 400
    assert "max_vgpu_memory_mib" in response.json(), response.json()
    assert not NamespacePolicy.objects.filter(namespace="team-a").exists()


def test_preset_memory_up_to_the_largest_known_card_is_saved(operator_api):
    largest = GpuModel.objects.order_by("-memory_mib").first()
    response = operator_api.post(PRESETS, new_preset(vgpu_memory_mib=largest.memory_mib), format="json")
    assert response.status_code == 201, response.json()
