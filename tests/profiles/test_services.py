"""Configuration writes: the single default, refused deletes, and reading Pod manifests."""

import pytest

from profiles.models import Preset
from profiles.services import ConfigurationInUse, PodDocumentError, pod_document_parse, preset_delete, preset_save

pytestmark = pytest.mark.django_db


def test_preset_save_moves_the_default_to_the_saved_preset():
    preset_save(preset=Preset(name="big", vgpu_memory_mib=40960, is_default=True))
    assert list(Preset.objects.filter(is_default=True).values_list("name", flat=True)) == ["big"]


def test_preset_delete_refuses_the_default():
    with pytest.raises(ConfigurationInUse, match="default preset"):
        preset_delete(preset=Preset.objects.get(name="default"))


def test_database_constraint_missed_by_validation_is_still_a_400(operator_api, monkeypatch):
    # A write that slips past validation (a race, a rule forgotten) must answer 400, not 500.
    monkeypatch.setattr("profiles.api.serializers.preset_validate", lambda preset: {})
    response = operator_api.post("/api/v1/presets/", {"name": "bad", "vgpu_memory_mib": 1, "min_model_size_b": 9,
                                                     "max_model_size_b": 3}, format="json")
    assert response.status_code == 400
    assert response.json() == {"max_model_size_b": ["The smallest model size must be below the largest."]}
    assert not Preset.objects.filter(name="bad").exists()


def test_pod_document_parse_reads_yaml():
    pod = pod_document_parse(text="kind: Pod\nspec:\n  containers: []\n")
    assert pod == {"kind": "Pod", "spec": {"containers": []}}


def test_pod_document_parse_reads_json():
    assert pod_document_parse(text='{"spec": {"containers": []}}') == {"spec": {"containers": []}}


@pytest.mark.parametrize(
    "text, message",
    [("spec: [", "not valid YAML"), ("", "found 0"), ("- a\n- b\n", "got list"),
     ("kind: Deployment\nspec: {template: {}}\n", "spec.template"), ("kind: Pod\n", "no spec"),
     ("kind: Pod\nspec: {}\nmetadata: {creationTimestamp: 2024-01-01}\n", "JSON cannot carry")],
    ids=["syntax", "empty", "list", "deployment", "no-spec", "date"],
)
def test_pod_document_parse_says_what_is_wrong(text, message):
    with pytest.raises(PodDocumentError, match=message):
        pod_document_parse(text=text)
