"""Adding a model from its own files: `manage.py import_model` and POST /api/v1/models/import/ (no network)."""

import json
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from mutations.engine import Knobs, catalog_need
from mutations.engine.model_files import language_model_from_files
from profiles.catalog import catalog_current, language_model_spec
from profiles.models import LanguageModel

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
IMPORT = "/api/v1/models/import/"
PHI = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "microsoft--Phi-3-mini-4k-instruct.json")
GEMMA_URL = "https://huggingface.co/google/gemma-3-12b-it/blob/main/config.json"
SOURCE = ["--source-url", "https://example.com/config.json"]


def model_dir(tmp_path: Path, fixture: str) -> Path:
    """A model directory as a download leaves it: <name>/config.json (from tests/fixtures/models/<fixture>.json)."""
    folder = tmp_path / fixture.rsplit("--", 1)[-1]
    folder.mkdir()
    shutil.copy(FIXTURES / f"{fixture}.json", folder / "config.json")
    return folder


def test_a_directory_becomes_a_catalog_entry_sized_from_its_architecture(capsys, tmp_path):
    gemma = model_dir(tmp_path, "google--gemma-3-12b-it")
    with pytest.raises(CommandError, match="--source-url"):
        call_command("import_model", str(gemma))
    call_command("import_model", str(gemma), "--name", "my-gemma-3-12b",
                 "--identifier", "acme/my-gemma-3-12b", "--source-url", GEMMA_URL)
    row = LanguageModel.objects.get(name="my-gemma-3-12b")
    assert (row.layers, row.attention_heads, row.kv_heads, row.head_dim) == (48, 16, 8, 256)
    assert (row.sliding_window, row.sliding_window_layers, row.max_context) == (1024, 40, 131072)
    assert float(row.vision_params_b) == pytest.approx(0.411, abs=0.005)
    assert row.identifiers == ["acme/my-gemma-3-12b"] and row.source_url == GEMMA_URL
    assert "my-gemma-3-12b: " in capsys.readouterr().out
    spec = catalog_current().language_models["acme/my-gemma-3-12b".rsplit("/", 1)[-1]]
    # The window bounds 40 of its 48 layers' KV: far less than 48 full layers at 131,072 tokens.
    assert catalog_need(spec, Knobs()).kv_mib < 0.25 * 2 * 48 * 8 * 256 * 2 * 131072 / 2**20


def test_importing_a_name_twice_needs_replace(tmp_path):
    call_command("import_model", PHI, "--name", "phi3-copy", *SOURCE)
    with pytest.raises(CommandError, match="exists"):
        call_command("import_model", PHI, "--name", "phi3-copy", *SOURCE)
    call_command("import_model", PHI, "--name", "phi3-copy", "--replace", *SOURCE)
    assert LanguageModel.objects.filter(name="phi3-copy").count() == 1


def test_a_safetensors_header_in_the_directory_gives_the_exact_count(tmp_path):
    shutil.copy(FIXTURES / "Qwen--Qwen2-7B-Instruct.json", tmp_path / "config.json")
    body = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [7_615_616_512],
                                                     "data_offsets": [0, 0]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 64)
    call_command("import_model", str(tmp_path), "--name", "qwen2-exact", *SOURCE)
    assert str(LanguageModel.objects.get(name="qwen2-exact").params_b) == "7.616"


def test_an_unreadable_config_names_the_field(tmp_path):
    config = json.loads((FIXTURES / "Qwen--Qwen2-7B-Instruct.json").read_text())
    config["num_key_value_heads"] = 5
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CommandError, match=r"config\.json num_key_value_heads"):
        call_command("import_model", str(tmp_path), "--name", "broken", *SOURCE)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CommandError, match=r"config\.json: not JSON"):
        call_command("import_model", str(tmp_path), "--name", "broken", *SOURCE)
    assert not LanguageModel.objects.filter(name="broken").exists()


def test_a_hub_id_is_fetched_with_huggingface_hub_and_the_token(monkeypatch, tmp_path):
    asked = {}

    def download(repo_id, filename, *, revision=None, token=None):
        asked.update(repo_id=repo_id, filename=filename, token=token)
        return str(FIXTURES / "mistralai--Mixtral-8x7B-Instruct-v0.1.json")

    tensors = {"model.layers.0.w": SimpleNamespace(dtype="BF16", shape=[46_702_792_704])}
    metadata = SimpleNamespace(files_metadata={"model-00001.safetensors": SimpleNamespace(tensors=tensors)})
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo_id, **kw: metadata)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    call_command("import_model", "mistralai/Mixtral-8x7B-v0.1")
    row = LanguageModel.objects.get(name="Mixtral-8x7B-v0.1")
    assert asked == {"repo_id": "mistralai/Mixtral-8x7B-v0.1", "filename": "config.json", "token": "hf_test"}
    assert str(row.params_b) == "46.703" and row.identifiers == ["mistralai/Mixtral-8x7B-v0.1"]
    assert row.source_url == "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"


def test_an_unreachable_hub_says_what_to_do(monkeypatch):
    def download(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(CommandError, match="HF_TOKEN, or download the files"):
        call_command("import_model", "acme/private-7B")


def upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def test_operator_uploads_config_json_and_the_catalog_serves_it(operator_api, django_capture_on_commit_callbacks):
    config = (FIXTURES / "openai--gpt-oss-20b.json").read_bytes()
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_api.post(IMPORT, {"config": upload("config.json", config), "name": "oss-20b-copy",
                                              "identifiers": ["acme/oss-20b-copy"],
                                              "source_url": "https://huggingface.co/openai/gpt-oss-20b"},
                                     format="multipart")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["dtype"], body["sliding_window"], body["sliding_window_layers"], body["attention_heads"]) == \
        ("mxfp4", 128, 12, 64)
    row = LanguageModel.objects.get(name="oss-20b-copy")
    assert catalog_current().language_models["oss-20b-copy"] == language_model_spec(row)


@pytest.mark.parametrize("files, field", [
    ({}, "config"),
    ({"config": b"[1, 2]"}, "config"),
    ({"config": b"{\"num_hidden_layers\": 2}"}, "config.json num_attention_heads"),
    ({"config": "mixtral", "index": b"{\"metadata\": {\"total_size\": 1000}}"},
     "model.safetensors.index.json metadata.total_size"),
    ({"config": "mixtral", "safetensors": b"\x10\0\0\0\0\0\0\0{}"}, "safetensors"),
], ids=["missing", "not-an-object", "missing-key", "inconsistent-index", "truncated-header"])
def test_unreadable_or_inconsistent_files_are_a_400_naming_the_field(operator_api, files, field):
    parts = {"name": "upload-test"}
    for part, data in files.items():
        if data == "mixtral":
            data = (FIXTURES / "mistralai--Mixtral-8x7B-Instruct-v0.1.json").read_bytes()
        parts[part] = upload(part, data)
    response = operator_api.post(IMPORT, parts, format="multipart")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert not LanguageModel.objects.filter(name="upload-test").exists()


def test_a_reader_cannot_import(reader_api):
    config = (FIXTURES / "microsoft--Phi-3-mini-4k-instruct.json").read_bytes()
    response = reader_api.post(IMPORT, {"config": upload("config.json", config)}, format="multipart")
    assert response.status_code == 403


ADMIN_IMPORT = "/admin/profiles/languagemodel/import/"


def test_the_admin_imports_a_model_from_its_files(staff_client):
    assert "Import from config.json" in staff_client.get("/admin/profiles/languagemodel/").content.decode()
    config = (FIXTURES / "Qwen--Qwen2-57B-A14B.json").read_bytes()
    response = staff_client.post(ADMIN_IMPORT, {"config": upload("config.json", config), "name": "qwen2-moe-copy",
                                                "source_url": "https://huggingface.co/Qwen/Qwen2-57B-A14B"})
    row = LanguageModel.objects.get(name="qwen2-moe-copy")
    assert response.status_code == 302 and response["Location"].endswith(f"/{row.pk}/change/")
    assert float(row.params_b) == pytest.approx(57.4, rel=0.01) and float(row.active_params_b) < 15


def test_the_admin_shows_which_file_and_key_is_wrong(staff_client):
    config = json.loads((FIXTURES / "Qwen--Qwen2-7B-Instruct.json").read_text())
    del config["vocab_size"]
    response = staff_client.post(ADMIN_IMPORT, {"config": upload("config.json", json.dumps(config).encode()),
                                                "name": "broken", "source_url": "https://example.com/config.json"})
    assert response.status_code == 200
    assert "config.json vocab_size: missing" in response.content.decode()
    assert not LanguageModel.objects.filter(name="broken").exists()


SEEDED = {  # the seeded entry each fixture's config.json describes
    "Qwen--Qwen2.5-7B-Instruct": "Qwen2.5-7B-Instruct",
    "meta-llama--Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct",
    "deepseek-ai--DeepSeek-R1-Distill-Llama-8B": "DeepSeek-R1-Distill-Llama-8B",
    "mistralai--Mistral-7B-Instruct-v0.3": "Mistral-7B-Instruct-v0.3",
    "mistralai--Mixtral-8x7B-Instruct-v0.1": "Mixtral-8x7B-Instruct-v0.1",
    "google--gemma-2-9b-it": "gemma-2-9b-it",
    "google--gemma-3-12b-it": "gemma-3-12b-it",
    "microsoft--Phi-3-mini-4k-instruct": "Phi-3-mini-4k-instruct",
    "openai--gpt-oss-20b": "gpt-oss-20b",
}


@pytest.mark.parametrize("fixture, name", SEEDED.items(), ids=list(SEEDED.values()))
def test_the_seeded_entry_is_what_importing_its_config_json_gives(fixture, name):
    imported = language_model_from_files(name=name, config=json.loads((FIXTURES / f"{fixture}.json").read_text()))
    seeded = language_model_spec(LanguageModel.objects.get(name=name))
    for field in ("layers", "attention_heads", "kv_heads", "head_dim", "hidden_size", "vocab_size", "max_context",
                  "dtype", "tied_embeddings", "sliding_window", "sliding_window_layers", "chunked_attention_layers",
                  "kv_shared_layers"):
        assert getattr(imported, field) == getattr(seeded, field), field
    # Counted from the shapes (biases and norms aside) against the safetensors totals the seed keeps.
    assert imported.params_b == pytest.approx(seeded.params_b, rel=0.01)
    assert imported.vision_params_b == pytest.approx(seeded.vision_params_b, abs=0.01)
