"""deploy/components/monitoring and unconverted-pods: they validate against their CRDs and fit the webhook."""

from __future__ import annotations

import copy
import json
import posixpath
import re

import jsonschema
import pytest
import yaml

from .conftest import DEPLOY_DIR, REPO_ROOT, find_object, find_prefixed
from .test_manifests import NAME, NAMESPACE, deployment, env_value, injector_container, labels_match, webhook

CRDS = REPO_ROOT / "tests" / "deploy" / "crds"
MONITORED = ["overlays/production+monitoring", "overlays/production+monitoring+unconverted-pods"]
SCANNED = ["overlays/production+unconverted-pods", "overlays/production+monitoring+unconverted-pods"]


def crd_schema(kind: str) -> dict:
    """The served version's openAPIV3Schema of a CRD in tests/deploy/crds/, strict: where the API server would
    prune a field it does not know (silently: a misspelt field is lost), the test refuses it."""
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
            return _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    raise AssertionError(f"no CRD for {kind} in {CRDS}")


def _strict(schema: dict) -> dict:
    if schema.get("type") == "object" and "properties" in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for key in ("properties", "patternProperties"):
        for sub in schema.get(key, {}).values():
            _strict(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            _strict(sub)
    return schema


def validate_custom(obj: dict) -> None:
    schema = crd_schema(obj["kind"])
    body = dict(obj)
    # metadata is validated by the API server itself, not by the CRD's schema
    schema = {**schema, "properties": {**schema["properties"], "metadata": {"type": "object"}}}
    jsonschema.Draft7Validator(schema).validate(body)


@pytest.fixture(params=MONITORED)
def monitored(request, builds):
    return builds[request.param]


@pytest.fixture(params=SCANNED)
def scanned(request, builds):
    return builds[request.param]


def test_servicemonitor_and_prometheusrule_validate_against_their_crds(monitored):
    for kind in ("ServiceMonitor", "PrometheusRule"):
        obj = find_object(monitored, kind, NAME)
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        validate_custom(obj)


def test_crd_validation_catches_a_misspelt_field(builds):
    monitor = copy.deepcopy(find_object(builds["overlays/production+monitoring"], "ServiceMonitor", NAME))
    monitor["spec"]["endpoints"][0]["tlsConfg"] = monitor["spec"]["endpoints"][0].pop("tlsConfig")
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(monitor)


def test_servicemonitor_scrapes_the_webhook_port_over_tls_with_the_metrics_token(monitored):
    monitor = find_object(monitored, "ServiceMonitor", NAME)
    service = find_object(monitored, "Service", NAME)
    assert labels_match(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    # the certificate is verified: its CA is in the serving Secret, the name is one it was issued for
    certificate = find_object(monitored, "Certificate", "volcano-injector-serving")
    tls = endpoint["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": certificate["spec"]["secretName"], "key": "ca.crt"}
    assert tls["serverName"] in certificate["spec"]["dnsNames"]
    assert not tls.get("insecureSkipVerify")
    # the token Prometheus sends is the one the webhook expects
    token = [e for e in injector_container(monitored)["env"] if e["name"] == "METRICS_TOKEN"][0]["valueFrom"]
    assert endpoint["authorization"]["credentials"] == {k: token["secretKeyRef"][k] for k in ("name", "key")}
    # the namespace label of the vGPU metrics is kept, not renamed to exported_namespace
    assert endpoint["honorLabels"] is True


def test_a_servicemonitor_of_its_own_scrapes_the_operator_pods_with_the_same_tls_and_token(monitored):
    monitor = find_object(monitored, "ServiceMonitor", "volcano-injector-operator")
    validate_custom(monitor)
    ui = find_object(monitored, "Service", "volcano-injector-ui")
    assert labels_match(monitor["spec"]["selector"], ui["metadata"]["labels"])
    assert not labels_match(monitor["spec"]["selector"], find_object(monitored, "Service", NAME)["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    (webhook_endpoint,) = find_object(monitored, "ServiceMonitor", NAME)["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in ui["spec"]["ports"]} and endpoint["path"] == "/metrics"
    assert endpoint["tlsConfig"]["ca"] == webhook_endpoint["tlsConfig"]["ca"]
    certificate = find_object(monitored, "Certificate", "volcano-injector-serving")
    assert endpoint["tlsConfig"]["serverName"] in certificate["spec"]["dnsNames"]
    assert endpoint["authorization"] == webhook_endpoint["authorization"]
    operator = [e for e in injector_container(monitored, "volcano-injector-operator")["env"]
                if e["name"] == "METRICS_TOKEN"][0]["valueFrom"]
    assert endpoint["authorization"]["credentials"] == {k: operator["secretKeyRef"][k] for k in ("name", "key")}


def test_prometheus_namespace_may_scrape_both_deployments_through_their_network_policies(monitored):
    for name, port in ((NAME, "https"), ("volcano-injector-operator", "https-ui")):
        rules = find_object(monitored, "NetworkPolicy", name)["spec"]["ingress"]
        assert {"ports": [{"port": port, "protocol": "TCP"}], "from": [{"namespaceSelector": {
            "matchLabels": {"volcano-injector.io/metrics-access": "true"}}}]} in rules, name


def test_metrics_path_resolves_to_the_metrics_view_on_the_webhook_only_port(monitored):
    from django.urls import resolve

    from injector_site.platform.middleware import WEBHOOK_PATHS

    (endpoint,) = find_object(monitored, "ServiceMonitor", NAME)["spec"]["endpoints"]
    assert resolve(endpoint["path"]).url_name == "metrics"
    assert endpoint["path"] in WEBHOOK_PATHS


def test_alert_rules_name_the_job_the_servicemonitor_creates(monitored):
    """The Prometheus Operator names the job after the Service; the rules must select that job."""
    rules = find_object(monitored, "PrometheusRule", NAME)
    service = find_object(monitored, "Service", NAME)
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    jobs = {job for expr in exprs for job in re.findall(r'job="([^"]+)"', expr)}
    assert jobs == {service["metadata"]["name"]}


def test_latency_alert_fires_at_half_the_webhooks_timeout(monitored):
    rules = find_object(monitored, "PrometheusRule", NAME)
    (rule,) = [r for g in rules["spec"]["groups"] for r in g["rules"]
               if r.get("alert") == "VolcanoInjectorLatencyNearTimeout"]
    _, hook = webhook(monitored)
    assert float(rule["expr"].rsplit(">", 1)[1]) == hook["timeoutSeconds"] / 2


def test_calls_failing_alert_names_the_webhook(monitored):
    rules = find_object(monitored, "PrometheusRule", NAME)
    (rule,) = [r for g in rules["spec"]["groups"] for r in g["rules"]
               if r.get("alert") == "VolcanoInjectorCallsFailing"]
    _, hook = webhook(monitored)
    assert set(re.findall(r'name="([^"]+)"', rule["expr"])) == {hook["name"]}


def test_grafana_dashboard_configmap_is_the_dashboard_file_labelled_for_the_sidecar(monitored):
    config_map = find_object(monitored, "ConfigMap", "volcano-injector-grafana-dashboard")  # no hash suffix
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    source = DEPLOY_DIR / "components" / "monitoring" / "dashboards" / "volcano-injector.json"
    assert config_map["data"] == {"volcano-injector.json": source.read_text()}
    assert json.loads(config_map["data"]["volcano-injector.json"])["uid"] == "volcano-injector"
    # kubectl apply keeps the whole object in an annotation, which may hold 256 KiB
    assert len(source.read_bytes()) < 200 * 1024


def test_unconverted_pods_cronjob_runs_the_command_with_the_webhooks_image_settings_and_secrets(scanned):
    cron = find_object(scanned, "CronJob", "volcano-injector-unconverted-pods")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (scan,) = pod["containers"]
    assert scan["command"] == ["python", "manage.py", "find_unconverted_pods"]
    assert (REPO_ROOT / "mutations" / "management" / "commands" / "find_unconverted_pods.py").is_file()
    webhook_container = injector_container(scanned)
    assert scan["image"] == webhook_container["image"]
    assert scan["envFrom"] == webhook_container["envFrom"]
    mounts = {m["mountPath"]: m["name"] for m in scan["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for e in scan["env"]:
        assert env_value(webhook_container, e["name"]) == e["value"]
        assert "secret" in volumes[mounts[posixpath.dirname(e["value"])]]


def test_unconverted_pods_scan_gets_a_token_for_its_own_read_only_account(scanned):
    cron = find_object(scanned, "CronJob", "volcano-injector-unconverted-pods")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert account != NAME  # the webhook's account stays without any permission
    assert find_object(scanned, "ServiceAccount", account)["metadata"]["namespace"] == NAMESPACE
    # the in-cluster configuration reads the token and CA where automount would put them
    (scan,) = pod["containers"]
    mount = [m for m in scan["volumeMounts"] if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount[0]["name"]]
    paths = {source.get("serviceAccountToken", {}).get("path") for source in volume["projected"]["sources"]}
    assert "token" in paths
    # bound to a role that only reads
    (binding,) = [o for o in scanned if o["kind"] == "ClusterRoleBinding"
                  and any(s["name"] == account and s["namespace"] == NAMESPACE for s in o["subjects"])]
    role = find_object(scanned, "ClusterRole", binding["roleRef"]["name"])
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs <= {"get", "list"}
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {("pods", "list"), ("namespaces", "list"), ("mutatingwebhookconfigurations", "get")}
    # the one webhook configuration it may read is the one deploy/ installs
    config, _ = webhook(scanned)
    (named,) = [rule for rule in role["rules"] if "resourceNames" in rule]
    assert named["resourceNames"] == [config["metadata"]["name"]]


def test_the_webhooks_own_account_gets_no_token(builds):
    for objects in builds.values():
        assert deployment(objects)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert find_object(objects, "ServiceAccount", NAME)["automountServiceAccountToken"] is False


def test_monitoring_config_does_not_change_the_webhook(builds):
    """The components add objects; the webhook's own ones are those of production alone, but for the rule
    monitoring adds to each NetworkPolicy for Prometheus' namespace."""
    base = {(o["kind"], o["metadata"]["name"]): o for o in builds["overlays/production"]}
    prometheus = {"namespaceSelector": {"matchLabels": {"volcano-injector.io/metrics-access": "true"}}}
    for name in MONITORED + SCANNED:
        for obj in builds[name]:
            key = (obj["kind"], obj["metadata"]["name"])
            if key in base:
                if obj["kind"] == "NetworkPolicy":
                    obj = copy.deepcopy(obj)
                    obj["spec"]["ingress"] = [r for r in obj["spec"]["ingress"] if r.get("from") != [prometheus]]
                assert obj == base[key], key
    assert find_prefixed(builds["overlays/production"], "ConfigMap", "volcano-injector-config")
