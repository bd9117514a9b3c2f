"""deploy/helm/volcano-injector: Helm's own Go SDK (helm-python-sdk) lints and renders it; every value the overlays
and components switch renders valid objects; a wrong value fails at install; and for every kustomize build the
deployment tests know (each overlay, production with each component) the chart with the equivalent values renders
the same objects, field for field, so the two can never drift."""

from __future__ import annotations

import base64
import copy
import re

import helm_python
import kubernetes_validate
import pytest
import yaml

from .conftest import DEPLOY_DIR
from .test_manifests import CERT_MANAGER_KINDS, CUSTOM_API_GROUPS, KUBERNETES_VERSIONS, NAMESPACE

CHART = DEPLOY_DIR / "helm" / "volcano-injector"
RELEASE = "volcano-injector"
CLUSTER_KINDS = {"Namespace", "MutatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding"}
# Labels that say who manages an object (kustomize or Helm): not compared.
MANAGER_LABELS = {"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "app.kubernetes.io/instance",
                  "helm.sh/chart"}
# kustomize's generated names end in a content hash (a changed ConfigMap rolls the Pods); the chart's
# checksum/config annotation does that instead. The hash's alphabet has no vowels (kustomize's encodeHash).
HASHED = re.compile(r"^(?P<base>.+)-[bcdfghkmt2-9]{10}$")

# components/production-settings; overlays/production adds mTLS, production-managed the control plane's range.
PRODUCTION_SETTINGS = {"replicas": 3, "autoscaling": {"minReplicas": 3, "maxReplicas": 10}}
PRODUCTION = {**PRODUCTION_SETTINGS, "mtls": {"enabled": True}}
TRIAL = {"image": {"repository": "volcano-injector"}, "database": {"mode": "trial"},
         "settings": {"LOG_LEVEL": "DEBUG"}}
CLOUDNATIVE_PG = {"database": {"mode": "cloudnative-pg"}}
# Each kustomize build (tests/deploy/conftest.py builds) and the chart values that stand for it.
BUILD_VALUES: dict[str, list[dict]] = {
    "overlays/production": [PRODUCTION],
    "overlays/trial": [TRIAL],
    "overlays/production-mtls": [PRODUCTION, {"mtls": {"enabled": True}}],
    "overlays/production-managed": [PRODUCTION_SETTINGS, {"webhook": {"sourceCIDR": "192.0.2.0/24"}}],
    "overlays/cloudnative-pg": [PRODUCTION, CLOUDNATIVE_PG],
    "overlays/production+all-pods": [PRODUCTION, {"webhook": {"gpuPodsOnly": False}}],
    "overlays/production+fail-closed": [PRODUCTION, {"webhook": {"failurePolicy": "Fail"}}],
    "overlays/production+all-pods+fail-closed": [PRODUCTION, {"webhook": {"gpuPodsOnly": False,
                                                                          "failurePolicy": "Fail"}}],
    "overlays/production+quotas": [PRODUCTION, {"quotas": {"enabled": True}}],
    "overlays/production+monitoring": [PRODUCTION, {"monitoring": {"enabled": True}}],
    "overlays/production+unconverted-pods": [PRODUCTION, {"unconvertedPods": {"enabled": True}}],
    "overlays/production+monitoring+unconverted-pods": [PRODUCTION, {"monitoring": {"enabled": True},
                                                                     "unconvertedPods": {"enabled": True}}],
    "overlays/production+cloudnative-pg+cloudnative-pg-backup": [
        PRODUCTION, CLOUDNATIVE_PG, {"database": {"cloudnativePG": {"backup": {"enabled": True}}}}],
    "overlays/production+quotas+cloudnative-pg": [PRODUCTION, CLOUDNATIVE_PG, {"quotas": {"enabled": True}}],
    "overlays/production+policy-reports": [PRODUCTION, {"policyReports": {"enabled": True}}],
    "overlays/production+policy-reports+cloudnative-pg": [PRODUCTION, CLOUDNATIVE_PG,
                                                          {"policyReports": {"enabled": True}}],
    "overlays/trial+quotas": [TRIAL, {"quotas": {"enabled": True}}],
    "overlays/production+gpu-inventory": [PRODUCTION, {"gpuInventory": {"enabled": True}}],
    "overlays/production+serving-groups": [PRODUCTION, {"servingGroups": {"enabled": True}}],
    "overlays/production+rightsizing": [PRODUCTION, {"rightSizing": {"enabled": True}}],
}
# Every switch values.yaml documents, on its own.
SWITCHES = {
    "defaults": {},
    "production": PRODUCTION,
    "trial": TRIAL,
    "cloudnative-pg with backups": {"database": {"mode": "cloudnative-pg",
                                                 "cloudnativePG": {"backup": {"enabled": True}}}},
    "existing database Secret": {"database": {"existingSecret": "my-db"}},
    "fail closed": {"webhook": {"failurePolicy": "Fail"}},
    "every Pod": {"webhook": {"gpuPodsOnly": False}},
    "selectors": {"webhook": {"namespaceSelector": {"matchLabels": {"gpu": "true"}},
                              "objectSelector": {"matchLabels": {"vgpu": "yes"}}}},
    "control plane range": {"webhook": {"sourceCIDR": "10.0.0.0/8"}},
    "mtls": {"mtls": {"enabled": True}},
    "monitoring": {"monitoring": {"enabled": True}},
    "unconverted-Pod scan": {"unconvertedPods": {"enabled": True}},
    "quotas": {"quotas": {"enabled": True}},
    "policy reports": {"policyReports": {"enabled": True}},
    "GPU inventory": {"gpuInventory": {"enabled": True}},
    "right-sizing": {"rightSizing": {"enabled": True, "prometheusURL": "https://prometheus.example:9090"}},
    "serving groups": {"servingGroups": {"enabled": True}},
    "no autoscaler, PDB or NetworkPolicy": {"autoscaling": {"enabled": False},
                                            "podDisruptionBudget": {"enabled": False},
                                            "networkPolicy": {"enabled": False}},
    "image and resources": {"image": {"repository": "r.example/vi", "tag": "1.2.3", "pullPolicy": "Always"},
                            "imagePullSecrets": [{"name": "pull"}],
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                          "limits": {"cpu": "2", "memory": "2Gi"}}},
}


def merged(*layers: dict) -> dict:
    """Values layers merged as Helm merges -f files: maps key by key, anything else replaced."""
    result: dict = {}
    for layer in layers:
        _merge(result, copy.deepcopy(layer))
    return result


def _merge(into: dict, layer: dict) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@pytest.fixture(scope="module")
def chart():
    return helm_python.Chart.load(CHART)


def render(chart, values: dict) -> list[dict]:
    rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def notes(chart, values: dict) -> str:
    rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


# --- lint, render, schema ---------------------------------------------------------------------------------

def test_helm_lint_strict_finds_nothing_above_info():
    found = helm_python.lint(CHART, strict=True)
    assert found["errors"] == []
    assert [m for m in found["messages"] if m["severity"] > 1] == [], found["messages"]


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_every_documented_switch_renders_valid_objects(chart, switch):
    objects = render(chart, SWITCHES[switch])
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), names
    assert ("MutatingWebhookConfiguration", RELEASE) in names and ("Deployment", RELEASE) in names
    for obj in objects:
        if obj["kind"] in CERT_MANAGER_KINDS or obj["apiVersion"].split("/")[0] in CUSTOM_API_GROUPS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[-1], strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{switch}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_the_failure_policy_and_the_apps_setting_come_from_one_value(chart):
    objects = render(chart, {"webhook": {"failurePolicy": "Fail"}})
    (webhook,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")]
    assert webhook["webhooks"][0]["failurePolicy"] == config["data"]["INJECTOR_FAILURE_POLICY"] == "Fail"


def test_a_settings_change_rolls_the_pods(chart):
    def checksum(values):
        return {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for o in render(chart, values) if o["kind"] == "Deployment"}
    before, after = checksum({}), checksum({"settings": {"LOG_LEVEL": "DEBUG"}})
    assert set(before) == {RELEASE, f"{RELEASE}-operator"}
    assert all(before[name] != after[name] for name in before)


@pytest.mark.parametrize(("values", "field"), [
    ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ({"webhook": {"timeoutSeconds": 60}}, "timeoutSeconds"),
    ({"replicaCount": 3}, "replicaCount"),
    ({"database": {"mode": "mysql"}}, "mode"),
    ({"settings": {"INJECTOR_FAILURE_POLICY": "Fail"}}, "settings"),
    ({"webhook": {"sourceCIDR": "the control plane"}}, "sourceCIDR"),
    ({"monitoring": {"enabled": "yes"}}, "enabled"),
])
def test_a_wrong_value_fails_at_install_naming_it(chart, values, field):
    with pytest.raises(helm_python.HelmValuesError, match=field):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def test_notes_say_how_to_verify_and_which_secrets_to_create(chart):
    text = notes(chart, {})
    assert "kubectl -n gpustack rollout status deploy/volcano-injector" in text
    assert "create secret generic volcano-injector-db" in text and "--dry-run=server" in text
    assert "create secret generic volcano-injector-db" not in notes(chart, {"database": {"mode": "trial"}})


# --- parity with kustomize ---------------------------------------------------------------------------------

def normalized(objects: list[dict]) -> dict[tuple[str, str], dict]:
    """Objects by (kind, name), without what only says who manages them or how rollouts are triggered:
    manager labels, checksum annotations, kustomize's name hashes; name-keyed lists in name order, Secret values
    decoded, the namespace filled in where the install sets it."""
    hashed = {}
    for obj in objects:
        match = HASHED.match(obj["metadata"]["name"])
        if obj["kind"] in ("ConfigMap", "Secret") and match:
            hashed[obj["metadata"]["name"]] = match["base"]
    found = {}
    for obj in objects:
        if obj["kind"] == "Namespace":  # Helm installs into a namespace it does not own (--create-namespace)
            continue
        obj = _unhashed(copy.deepcopy(obj), hashed)
        metadata = obj["metadata"]
        if obj["kind"] not in CLUSTER_KINDS:
            metadata.setdefault("namespace", NAMESPACE)
        for key, drop in (("labels", MANAGER_LABELS), ("annotations", set())):
            kept = {k: v for k, v in (metadata.get(key) or {}).items()
                    if k not in drop and not k.startswith("checksum/")}
            metadata.pop(key, None)
            if kept:
                metadata[key] = kept
        if obj["kind"] == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in (obj.pop("data", None) or {}).items()}
            data.update(obj.pop("stringData", None) or {})
            obj["data"] = data
        found[(obj["kind"], metadata["name"])] = _ordered(obj)
    return found


def _unhashed(value, hashed: dict[str, str]):
    if isinstance(value, dict):
        return {k: _unhashed(v, hashed) for k, v in value.items()}
    if isinstance(value, list):
        return [_unhashed(v, hashed) for v in value]
    if isinstance(value, str):
        return hashed.get(value, value)
    return value


def _ordered(value):
    """Lists of named things (containers, env, volumes, ports) in name order; pod template annotations dropped
    when only the checksum was there; CEL and PromQL expressions with their whitespace collapsed (kustomize re-folds
    them: a more-indented line in a folded scalar comes back with an extra line break)."""
    if isinstance(value, dict):
        value = {k: _ordered(v) for k, v in value.items()}
        for key in ("expression", "expr"):  # CEL (matchConditions) and PromQL (alert rules) ignore whitespace
            if isinstance(value.get(key), str):
                value[key] = " ".join(value[key].split())
        template_metadata = value.get("metadata")
        if isinstance(template_metadata, dict) and template_metadata.get("annotations") is not None:
            kept = {k: v for k, v in template_metadata["annotations"].items() if not k.startswith("checksum/")}
            if kept:
                template_metadata["annotations"] = kept
            else:
                del template_metadata["annotations"]
        return value
    if isinstance(value, list):
        items = [_ordered(v) for v in value]
        if items and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in items):
            return sorted(items, key=lambda v: v["name"])
        return items
    return value


@pytest.mark.parametrize("build_name", sorted(BUILD_VALUES))
def test_the_chart_renders_what_kustomize_builds(chart, builds, build_name):
    kustomized = normalized(builds[build_name])
    helmed = normalized(render(chart, merged(*BUILD_VALUES[build_name])))
    assert sorted(helmed) == sorted(kustomized), "kinds and names differ"
    for key, expected in kustomized.items():
        assert helmed[key] == expected, f"{build_name}: {key[0]}/{key[1]} differs"


def test_parity_covers_every_overlay_and_component(builds):
    components = {p.name for p in (DEPLOY_DIR / "components").iterdir() if p.is_dir()}
    overlays = {f"overlays/{p.name}" for p in (DEPLOY_DIR / "overlays").iterdir() if p.is_dir()}
    covered = set(BUILD_VALUES)
    assert overlays <= covered
    # production-settings, mtls and webhook-from-control-plane are what the production overlays are made of; the
    # others each in a production build
    named = {part for build in covered for part in build.split("+")[1:]} | {
        "production-settings", "mtls", "webhook-from-control-plane"}
    assert components <= named, components - named
