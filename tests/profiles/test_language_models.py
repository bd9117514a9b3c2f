"""The model catalog on PostgreSQL: seeded rows, /api/v1/models/, the admin, and Pods sized from it via /mutate."""

import base64
import json

import pytest

from mutations.engine import Knobs, catalog_need
from mutations.models import AdmissionAudit
from profiles.catalog import catalog_current, language_model_spec
from profiles.models import ConfigVersion, LanguageModel
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod, resource_errors

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models/"


def new_model(**fields) -> dict:
    return {"name": "Acme-13B-Chat", "identifiers": ["acme/Acme-13B-Chat"], "params_b": 13.0, "layers": 40,
            "kv_heads": 8, "head_dim": 128, "hidden_size": 5120, "vocab_size": 32000, "max_context": 16384,
            "source_url": "https://huggingface.co/acme/Acme-13B-Chat/blob/main/config.json", **fields}


def vllm_pod(model: str, *args: str, gpus: str = "1") -> dict:
    pod = pods.vllm_deployment_pod(gpus=gpus, model=model)
    pod["spec"]["containers"][0]["args"] += list(args)
    return pod


def test_the_seeded_catalog_holds_popular_models_each_with_its_source():
    rows = list(LanguageModel.objects.all())
    assert len(rows) >= 25
    names = {row.name for row in rows}
    for family in ("Llama-3.1-8B-Instruct", "Qwen2.5-0.5B-Instruct", "Qwen2.5-72B-Instruct", "Qwen3-8B",
                   "Mistral-7B-Instruct-v0.3", "Mixtral-8x7B-Instruct-v0.1", "DeepSeek-R1-Distill-Qwen-7B",
                   "gemma-2-9b-it", "gemma-3-27b-it", "Phi-3-mini-4k-instruct", "phi-4", "gpt-oss-20b"):
        assert family in names
    for row in rows:
        assert row.source_url.startswith("https://huggingface.co/") and row.source_url.endswith("/config.json")


def test_seeded_numbers_are_the_configs():
    llama = LanguageModel.objects.get(name="Llama-3.1-8B-Instruct")
    assert (llama.layers, llama.kv_heads, llama.head_dim, llama.max_context) == (32, 8, 128, 131072)
    qwen = LanguageModel.objects.get(name="Qwen2.5-7B-Instruct")
    assert (qwen.layers, qwen.kv_heads, qwen.head_dim, qwen.max_context) == (28, 4, 128, 32768)
    phi = LanguageModel.objects.get(name="Phi-3-mini-4k-instruct")
    assert (phi.layers, phi.kv_heads, phi.head_dim, phi.max_context) == (32, 32, 96, 4096)


def test_seeded_rows_have_their_attention_heads_and_vision_towers():
    heads = dict(LanguageModel.objects.values_list("name", "attention_heads"))
    assert all(heads.values()), [name for name, value in heads.items() if not value]
    assert (heads["Llama-3.1-70B-Instruct"], heads["Qwen2.5-7B-Instruct"], heads["Phi-3-mini-4k-instruct"]) == \
        (64, 28, 32)
    gemma = LanguageModel.objects.get(name="gemma-3-27b-it")
    assert str(gemma.vision_params_b) == "0.417"
    # Quantized, the tower stays in 16 bits: an AWQ Gemma 3 weighs the tower at 2 bytes a parameter.
    awq = catalog_need(language_model_spec(gemma), Knobs(weight_type="awq", max_model_len=8192))
    assert awq.weights_mib > (27.432 - 0.417) * 1e9 * 0.52 / 2**20 + 0.417e9 * 2 / 2**20


def test_api_lists_and_matches_models(reader_api):
    body = reader_api.get(MODELS, {"matches": "Qwen/Qwen2.5-7B-Instruct-AWQ"}).json()
    assert [row["name"] for row in body["results"]] == ["Qwen2.5-7B-Instruct"]
    assert "qwen2.5-7b" in body["results"][0]["match_keys"]


def test_operator_adds_a_model_and_the_next_pod_is_sized_from_it(operator_api, post_review,
                                                                 django_capture_on_commit_callbacks):
    before = ConfigVersion.objects.get().version
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_api.post(MODELS, new_model(), format="json")
    assert response.status_code == 201, response.json()
    assert ConfigVersion.objects.get().version > before
    body = post_review(pods.review(vllm_pod("acme/Acme-13B-Chat", "--max-model-len", "8192"))).json()["response"]
    expected = catalog_need(language_model_spec(LanguageModel.objects.get(name="Acme-13B-Chat")),
                            Knobs(max_model_len=8192))
    patched = default_pod(apply_patch_v4(vllm_pod("acme/Acme-13B-Chat"), json.loads(base64.b64decode(body["patch"]))))
    assert patched["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == \
        str(expected.per_card_mib)
    assert any("serving Acme-13B-Chat" in w for w in body["warnings"])


@pytest.mark.parametrize("fields, field", [
    ({"params_b": 0}, "params_b"),
    ({"active_params_b": 20}, "active_params_b"),
    ({"layers": 0}, "layers"),
    ({"sliding_window_layers": 41, "sliding_window": 4096}, "sliding_window_layers"),
    ({"dtype": "int3"}, "dtype"),
    ({"identifiers": ["Qwen/Qwen2.5-7B-Instruct-AWQ"]}, "identifiers"),
    ({"identifiers": "acme"}, "identifiers"),
    ({"source_url": "not a url"}, "source_url"),
    ({"attention_heads": 4}, "attention_heads"),
    ({"vision_params_b": 13}, "vision_params_b"),
    ({"chunked_attention_layers": 30}, "chunked_attention_size"),
    ({"chunked_attention_layers": 30, "chunked_attention_size": 8192, "sliding_window_layers": 20,
      "sliding_window": 4096}, "chunked_attention_layers"),
    ({"kv_shared_layers": 40}, "kv_shared_layers"),
], ids=["params", "active", "layers", "window-layers", "dtype", "clash", "not-a-list", "url", "heads", "vision",
        "chunk-size", "chunked-layers", "kv-shared"])
def test_bad_model_is_a_400_naming_the_field(operator_api, fields, field):
    response = operator_api.post(MODELS, new_model(**fields), format="json")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert not LanguageModel.objects.filter(name="Acme-13B-Chat").exists()


def test_reader_cannot_change_the_catalog(reader_api):
    assert reader_api.post(MODELS, new_model(), format="json").status_code == 403


def test_changing_a_model_reloads_the_cached_catalog(operator_api, django_capture_on_commit_callbacks):
    assert catalog_current().language_models["qwen2.5-7b"].max_context == 32768
    row = LanguageModel.objects.get(name="Qwen2.5-7B-Instruct")
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_api.patch(f"{MODELS}{row.pk}/", {"max_context": 131072}, format="json")
    assert response.status_code == 200
    assert catalog_current().language_models["qwen2.5-7b"].max_context == 131072


def test_mutate_sizes_a_vllm_pod_from_the_seeded_catalog_and_audits_the_breakdown(post_review):
    pod = vllm_pod("Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192")
    body = post_review(pods.review(pod)).json()["response"]
    patched = default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(body["patch"]))))
    assert resource_errors(patched) == []
    assert patched["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "18176"
    row = AdmissionAudit.objects.get()
    assert row.vgpu_memory_mib == 18176 and row.source.startswith("serving command: vllm serving")
    sizing = row.containers[0]["sizing"]
    assert (sizing["matched"], sizing["kv_tokens"], sizing["per_card_mib"]) == ("Qwen2.5-7B-Instruct", 8192, 18176)
    # The breakdown stays whole in the audit row; the warning says the result first, short.
    assert "weights 14,526 MiB (bf16) + KV cache 448 MiB (8,192 tokens)" in sizing["breakdown"]
    assert any(w.startswith("vllm: 1 vGPU of 18,176 MiB (vllm serving Qwen2.5-7B-Instruct, 8k context)")
               for w in row.warnings)


def test_mutate_refuses_70b_on_one_80_gb_card_with_the_fix(post_review):
    pod = vllm_pod("meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192")
    pod["metadata"]["annotations"] = {"volcano-injector.io/gpu-type": "A100-80GB"}
    body = post_review(pods.review(pod)).json()["response"]
    assert body["allowed"] is False
    assert "--tensor-parallel-size 2 and nvidia.com/gpu: 2" in body["status"]["message"]


def test_preview_shows_the_breakdown(reader_api):
    pod = vllm_pod("Qwen/Qwen2.5-0.5B-Instruct")
    body = reader_api.post("/api/v1/preview/", {"namespace": "team-a", "pod": pod}, format="json").json()
    assert body["grants"][0]["sizing"]["matched"] == "Qwen2.5-0.5B-Instruct"
    assert body["source"].startswith("serving command:")


def test_admin_lists_the_catalog_with_grants(staff_client):
    response = staff_client.get("/admin/profiles/languagemodel/")
    assert response.status_code == 200
    assert b"Qwen2.5-7B-Instruct" in response.content and b"18,176 / " in response.content


def test_admin_refuses_a_clashing_identifier(staff_client):
    data = {**new_model(identifiers="Qwen/Qwen2.5-7B-Instruct"), "dtype": "bf16", "sliding_window_layers": 0}
    response = staff_client.post("/admin/profiles/languagemodel/add/", data)
    assert response.status_code == 200 and b"already means catalog entry Qwen2.5-7B-Instruct" in response.content


@pytest.mark.parametrize("url, fields, field", [
    ("/api/v1/presets/", {"name": "x", "vgpu_memory_mib": 8192, "kv_cache_sequences": 0}, "kv_cache_sequences"),
    ("/api/v1/presets/", {"name": "x", "vgpu_memory_mib": 8192, "model_size_gpus": 0}, "model_size_gpus"),
    ("/api/v1/namespace-policies/", {"namespace": "x", "kv_cache_sequences": 1000}, "kv_cache_sequences"),
])
def test_sizing_settings_out_of_range_are_a_400_naming_the_field(operator_api, url, fields, field):
    response = operator_api.post(url, fields, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_policy_switches_sizing_from_the_serving_command_off(operator_api, post_review,
                                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        created = operator_api.post("/api/v1/namespace-policies/", {"namespace": "team-a", "default_preset": "default",
                                                                    "infer_from_serving": False}, format="json")
    assert created.status_code == 201, created.json()
    body = post_review(pods.review(vllm_pod("Qwen/Qwen2.5-7B-Instruct"))).json()["response"]
    assert AdmissionAudit.objects.get().source == "namespace policy team-a" and body["allowed"]


@pytest.mark.parametrize("fields, field, named", [
    ({"name": "Acme-13B\u202e-Chat"}, "name", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    ({"identifiers": ["acme/Acme-13B\u200b-Chat"]}, "identifiers", "U+200B (ZERO WIDTH SPACE)"),
], ids=["name", "identifier"])
def test_a_model_name_with_a_bidi_control_or_zero_width_character_is_a_400_naming_it(operator_api, fields, field,
                                                                                     named):
    response = operator_api.post(MODELS, new_model(**fields), format="json")
    assert response.status_code == 400 and set(response.json()) == {field}, response.json()
    assert named in response.json()[field][0] and "printable characters only" in response.json()[field][0]
    assert not LanguageModel.objects.filter(source_url=new_model()["source_url"]).exists()
