"""Configuration writes: the single default, refused deletes, and reading Pod manifests."""

import time

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


# --- reading a Pod someone pasted: bounded, whatever the YAML -------------------------------------

ALIAS_BOMB = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
kind: Pod
spec: {containers: [{name: x, image: x, args: *i}]}
"""


@pytest.mark.parametrize("text, says", [
    pytest.param(ALIAS_BOMB, "more than 10 YAML aliases", id="billion laughs"),
    pytest.param("kind: Pod\nspec: {containers: [{name: x, image: x, resources: {limits: {cpu: .inf}}}]}",
                 "infinity", id=".inf"),
    pytest.param("kind: Pod\nspec: {containers: [{name: x, image: x, args: [.nan]}]}", "infinity or NaN", id=".nan"),
    pytest.param("kind: Pod\nspec: " + "[" * 5000 + "]" * 5000, "nested too deeply", id="deep nesting"),
    pytest.param("kind: Pod\nspec: {}\n#" + "x" * 600_000, "at most 524288", id="over the size cap"),
])
def test_a_pod_document_that_would_cost_more_than_a_pod_is_refused_with_the_reason(text, says):
    # This process's CPU time, not the wall clock: on the shared 2-core machine other suites' load stretched
    # the deep-nesting case (about 0.9 s of CPU) past 2 s of wall time. A document that is not refused early
    # (a billion laughs expanded) costs far more CPU than the bound either way.
    started = time.process_time()
    with pytest.raises(PodDocumentError) as refused:
        pod_document_parse(text=text)
    assert says in str(refused.value)
    assert time.process_time() - started < 2


def test_a_pod_with_brackets_in_its_strings_still_reads():
    pod = pod_document_parse(text="kind: Pod\nspec: {containers: [{name: a, image: x, args: ['[[[[', '{{{{ x }}}}']}]}")
    assert pod["spec"]["containers"][0]["args"] == ["[[[[", "{{{{ x }}}}"]


def test_a_pod_with_a_few_yaml_aliases_still_reads():
    pod = pod_document_parse(text="kind: Pod\nx: &env [{name: A, value: '1'}]\nspec: {containers: "
                                  "[{name: a, image: x, env: *env}, {name: b, image: x, env: *env}]}")
    assert pod["spec"]["containers"][1]["env"] == [{"name": "A", "value": "1"}]


@pytest.mark.django_db
def test_the_api_preview_refuses_an_alias_bomb_with_a_400_at_once(reader_api):
    started = time.monotonic()
    response = reader_api.post("/api/v1/preview/?namespace=team-a", ALIAS_BOMB, content_type="application/yaml")
    assert response.status_code == 400 and "aliases" in response.json()["detail"]
    assert time.monotonic() - started < 2


@pytest.mark.django_db
def test_the_api_preview_answers_a_400_not_a_500_for_yaml_infinity(reader_api):
    text = "kind: Pod\nspec: {containers: [{name: x, image: x, resources: {limits: {cpu: .inf}}}]}"
    response = reader_api.post("/api/v1/preview/?namespace=team-a", text, content_type="application/yaml")
    assert response.status_code == 400 and "infinity" in response.json()["detail"]
