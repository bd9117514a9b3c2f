"""The kustomizations in deploy/ build, validate against the Kubernetes schemas and keep the rules."""

from __future__ import annotations

import posixpath
from urllib.parse import urlparse

import kubernetes_validate
import pytest

from .conftest import REPO_ROOT, find_object, find_prefixed

NAMESPACE = "gpustack"
NAME = "volcano-injector"
OPERATOR = "volcano-injector-operator"
UI_SERVICE = "volcano-injector-ui"
WEBHOOK_NAME = "pods.volcano-injector.io"
SYSTEM_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease", "cert-manager"}
# The oldest release with GA matchConditions, and the newest schema we have.
KUBERNETES_VERSIONS = ["1.30.0", "1.34.0"]
CERT_MANAGER_KINDS = {"Issuer", "ClusterIssuer", "Certificate"}
BUILD_NAMES = [
    "overlays/production",
    "overlays/trial",
    "overlays/production+all-pods",
    "overlays/production+fail-closed",
    "overlays/production+all-pods+fail-closed",
    "overlays/production-managed",
    "overlays/production+quotas",
    "overlays/trial+quotas",
    "overlays/production+monitoring",
    "overlays/production+unconverted-pods",
    "overlays/production+monitoring+unconverted-pods",
    "overlays/production+gpu-inventory",
    "overlays/trial+gpu-inventory",
    "overlays/cloudnative-pg",
    "overlays/production+cloudnative-pg+cloudnative-pg-backup",
    "overlays/production+quotas+cloudnative-pg",
    "overlays/production+serving-groups",
    "overlays/production+policy-reports",
    "overlays/production+rightsizing",
]
QUOTA_BUILDS = ["overlays/production+quotas", "overlays/trial+quotas", "overlays/production+quotas+cloudnative-pg"]
QUOTA_JOB = "volcano-injector-quotas"
# Kinds whose schemas come from CRDs (tests/deploy/crds/), not from kubernetes-validate.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
# Custom resources whose schemas are not in kubernetes-validate: cert-manager's (checked by hand below),
# CloudNativePG's, its backup plugin's and the Prometheus Operator's (tests/deploy/test_cloudnative_pg.py,
# against the CRD schemas in tests/deploy/crds).
CUSTOM_API_GROUPS = {"cert-manager.io", "postgresql.cnpg.io", "barmancloud.cnpg.io", "monitoring.coreos.com"}


@pytest.fixture(params=BUILD_NAMES)
def build(request, builds):
    return request.param, builds[request.param]


def deployment(objects, name=NAME):
    return find_object(objects, "Deployment", name)


def injector_container(objects, name=NAME):
    containers = deployment(objects, name)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "injector")


# The webhook's Deployment and the operators' (the same image, INJECTOR_ROLE webhook and operator).
DEPLOYMENTS = [NAME, OPERATOR]


def webhook(objects):
    config = find_object(objects, "MutatingWebhookConfiguration", NAME)
    hooks = [w for w in config["webhooks"] if w["name"] == WEBHOOK_NAME]
    assert len(hooks) == 1
    return config, hooks[0]


def env_value(container, name):
    values = [e.get("value") for e in container.get("env", []) if e["name"] == name]
    assert len(values) == 1, f"{name} is set {len(values)} times in {container['name']}"
    return values[0]


def labels_match(selector: dict, labels: dict) -> bool:
    assert not selector.get("matchExpressions"), "only matchLabels selectors are used here"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


# --- schemas ----------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_kubernetes_object_validates_against_the_schema(build, version):
    name, objects = build
    for obj in objects:
        if obj["kind"] in CERT_MANAGER_KINDS | CRD_KINDS or obj["apiVersion"].split("/")[0] in CUSTOM_API_GROUPS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: "
                        f"{exc.message} at {list(exc.path)}")


def test_cert_manager_objects_have_their_required_fields(build):
    """cert-manager's CRDs are not in kubernetes-validate: check what cert-manager's own validation demands."""
    name, objects = build
    cm_objects = [o for o in objects if o["kind"] in CERT_MANAGER_KINDS]
    assert cm_objects, f"{name} has no cert-manager objects"
    issuers = {o["metadata"]["name"]: o for o in cm_objects if o["kind"] == "Issuer"}
    for obj in cm_objects:
        assert obj["apiVersion"] == "cert-manager.io/v1"
        assert obj["metadata"]["namespace"] == NAMESPACE
        spec = obj["spec"]
        if obj["kind"] == "Issuer":
            # exactly one issuer type
            types = [k for k in ("selfSigned", "ca", "acme", "vault", "venafi") if k in spec]
            assert len(types) == 1, f"Issuer {obj['metadata']['name']} has issuer types {types}"
            if "ca" in spec:
                assert spec["ca"]["secretName"]
        if obj["kind"] == "Certificate":
            assert spec["secretName"], "Certificate.spec.secretName is required"
            assert spec["issuerRef"]["name"] in issuers, "issuerRef names an Issuer of this build"
            assert spec["issuerRef"].get("kind", "Issuer") == "Issuer"
            assert spec.get("dnsNames") or spec.get("commonName"), "a Certificate needs a name"
            if spec.get("isCA"):
                assert spec["issuerRef"]["name"] in issuers
    # the CA issuer reads the CA Certificate's Secret
    ca_issuer_secrets = {i["spec"]["ca"]["secretName"] for i in issuers.values() if "ca" in i["spec"]}
    ca_cert_secrets = {o["spec"]["secretName"] for o in cm_objects
                       if o["kind"] == "Certificate" and o["spec"].get("isCA")}
    assert ca_issuer_secrets == ca_cert_secrets


# The one exception: the GPU inventory's permission to read the vGPU device plugin's ConfigMap lives where
# that ConfigMap does (deploy/components/gpu-inventory).
ELSEWHERE = {("Role", "volcano-injector-gpu-inventory"): "kube-system",
             ("RoleBinding", "volcano-injector-gpu-inventory"): "kube-system"}


def test_every_namespaced_object_is_in_the_injector_namespace(build):
    name, objects = build
    cluster_scoped = {"Namespace", "MutatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding"}
    for obj in objects:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"]
        elif (obj["kind"], obj["metadata"]["name"]) in ELSEWHERE:
            assert obj["metadata"].get("namespace") == ELSEWHERE[(obj["kind"], obj["metadata"]["name"])]
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"
    assert find_object(objects, "Namespace", NAMESPACE)


# --- webhook configuration ---------------------------------------------------------


def test_webhook_basics(build):
    _, objects = build
    _, hook = webhook(objects)
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["reinvocationPolicy"] in {"IfNeeded", "Never"}
    assert hook["rules"] == [{
        "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
        "resources": ["pods"], "scope": "Namespaced",
    }]
    assert "url" not in hook["clientConfig"]


def test_webhook_failure_policy_matches_the_apps_setting(build):
    _, objects = build
    _, hook = webhook(objects)
    config = find_prefixed(objects, "ConfigMap", "volcano-injector-config")
    assert config["data"]["INJECTOR_FAILURE_POLICY"] in {"Ignore", "Fail"}
    assert hook["failurePolicy"] == config["data"]["INJECTOR_FAILURE_POLICY"]
    # and the Deployment reads that ConfigMap
    refs = [e["configMapRef"]["name"] for e in injector_container(objects).get("envFrom", [])]
    assert config["metadata"]["name"] in refs


def test_fail_closed_component_switches_both_settings(builds):
    objects = builds["overlays/production+fail-closed"]
    _, hook = webhook(objects)
    assert hook["failurePolicy"] == "Fail"
    assert find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"]["INJECTOR_FAILURE_POLICY"] == "Fail"
    _, default_hook = webhook(builds["overlays/production"])
    assert default_hook["failurePolicy"] == "Ignore"


def test_mtls_component_mounts_the_client_ca_where_the_server_reads_it(builds):
    objects = builds["overlays/production"]  # mTLS by default
    container = injector_container(objects)
    ca_file = env_value(container, "TLS_CLIENT_CA_FILE")
    # the webhook's only: the operator Deployment's browsers have no client certificate, and no CA is mounted
    assert "TLS_CLIENT_CA_FILE" not in find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"]
    assert "TLS_CLIENT_CA_FILE" not in {e["name"] for e in injector_container(objects, OPERATOR)["env"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = mounts[posixpath.dirname(ca_file)]
    assert mount.get("readOnly") and "subPath" not in mount  # a whole directory: renewals arrive
    volumes = {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "volcano-injector-client-ca"
    assert secret["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # never the CA's key
    assert posixpath.basename(ca_file) == "ca.crt"
    # the other mounts and variables are still there (a strategic merge by name, not a replaced list)
    without = injector_container(builds["overlays/production-managed"])
    assert set(mounts) > {m["mountPath"] for m in without["volumeMounts"]}
    assert {e["name"] for e in container["env"]} == {e["name"] for e in without["env"]} | {"TLS_CLIENT_CA_FILE"}


def test_namespace_selector_excludes_system_namespaces_and_its_own(build):
    _, objects = build
    _, hook = webhook(objects)
    selector = hook["namespaceSelector"]
    assert not selector.get("matchLabels")
    expressions = selector["matchExpressions"]
    assert len(expressions) == 1
    (expression,) = expressions
    assert expression["key"] == "kubernetes.io/metadata.name"
    assert expression["operator"] == "NotIn"
    assert SYSTEM_NAMESPACES | {NAMESPACE} <= set(expression["values"])
    # its own namespace is the one the Deployment actually runs in
    assert deployment(objects)["metadata"]["namespace"] in expression["values"]


def test_object_selector_honours_the_skip_label(build):
    _, objects = build
    _, hook = webhook(objects)
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": "volcano-injector.io/skip", "operator": "NotIn", "values": ["true"]}]
    }


def test_match_conditions_send_only_gpu_pods_unless_all_pods(builds):
    for name, objects in builds.items():
        _, hook = webhook(objects)
        if "all-pods" in name:
            assert "matchConditions" not in hook, name
        else:
            assert [c["name"] for c in hook["matchConditions"]] == ["requests-nvidia-gpu"], name


def test_client_config_points_at_the_webhook_service(build):
    _, objects = build
    config, hook = webhook(objects)
    ref = hook["clientConfig"]["service"]
    assert ref["name"] == NAME and ref["namespace"] == NAMESPACE
    assert ref["path"] == "/mutate"
    service = find_object(objects, "Service", ref["name"])
    assert service["metadata"]["namespace"] == ref["namespace"]
    ports = [p for p in service["spec"]["ports"] if p["port"] == ref.get("port", 443)]
    assert len(ports) == 1, "the Service exposes the port the webhook calls"
    assert ref.get("port", 443) == 443
    # the port leads to the container port named https
    container = injector_container(objects)
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[0]["targetPort"] == "https"
    assert named["https"] == 8443
    assert labels_match({"matchLabels": service["spec"]["selector"]},
                        deployment(objects)["spec"]["template"]["metadata"]["labels"])
    # no caBundle pasted by hand: cert-manager injects it
    assert "caBundle" not in hook["clientConfig"]


def test_ca_bundle_is_injected_from_the_serving_certificate(build):
    _, objects = build
    config, _ = webhook(objects)
    namespace, certificate_name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = find_object(objects, "Certificate", certificate_name)
    assert certificate["metadata"]["namespace"] == namespace
    assert not certificate["spec"].get("isCA")


def test_serving_certificate_covers_both_services_and_is_mounted(build):
    _, objects = build
    config, hook = webhook(objects)
    _, certificate_name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = find_object(objects, "Certificate", certificate_name)
    dns_names = set(certificate["spec"]["dnsNames"])
    ref = hook["clientConfig"]["service"]
    # the name the API server dials
    assert f"{ref['name']}.{ref['namespace']}.svc" in dns_names
    ui = find_object(objects, "Service", UI_SERVICE)
    assert f"{UI_SERVICE}.{ui['metadata']['namespace']}.svc" in dns_names
    # the Deployment mounts that Secret, as a whole directory (no subPath: the
    # kubelet then updates renewed files in place)
    pod_spec = deployment(objects)["spec"]["template"]["spec"]
    tls_volumes = [v for v in pod_spec["volumes"]
                   if v.get("secret", {}).get("secretName") == certificate["spec"]["secretName"]]
    assert len(tls_volumes) == 1
    container = injector_container(objects)
    mounts = [m for m in container["volumeMounts"] if m["name"] == tls_volumes[0]["name"]]
    assert len(mounts) == 1 and "subPath" not in mounts[0]
    assert posixpath.dirname(env_value(container, "TLS_CERT_FILE")) == mounts[0]["mountPath"]
    assert posixpath.dirname(env_value(container, "TLS_KEY_FILE")) == mounts[0]["mountPath"]
    assert posixpath.basename(env_value(container, "TLS_CERT_FILE")) == "tls.crt"
    assert posixpath.basename(env_value(container, "TLS_KEY_FILE")) == "tls.key"


def test_match_condition_is_valid_cel_and_selects_gpu_pods(builds):
    """Evaluate the matchCondition with a CEL interpreter on Pods as the API server sees them."""
    import celpy

    _, hook = webhook(builds["overlays/production"])
    (condition,) = hook["matchConditions"]
    environment = celpy.Environment()
    program = environment.program(environment.compile(condition["expression"]))

    def container(resources=None, name="main"):
        c = {"name": name, "image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}
        c["resources"] = resources if resources is not None else {}
        return c

    gpu = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    cases = [
        ({"containers": [container(gpu)]}, True),
        ({"containers": [container({"requests": {"nvidia.com/gpu": "1"}})]}, True),
        ({"containers": [container(), container(gpu, name="second")]}, True),
        ({"containers": [container()], "initContainers": [container(gpu, name="init")]}, True),
        ({"containers": [container()]}, False),
        ({"containers": [container({"limits": {"cpu": "1"}, "requests": {"cpu": "1"}})]}, False),
        ({"containers": [container({"limits": {"volcano.sh/vgpu-number": "1"}})]}, False),
        ({"containers": [container()], "initContainers": [container(name="init")]}, False),
    ]
    for spec, expected in cases:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x-"}, "spec": spec}
        result = program.evaluate({"object": celpy.json_to_cel(pod)})
        assert bool(result) is expected, (spec, result)


# --- Deployment ------------------------------------------------------------------


def test_deployment_runs_at_least_two_replicas_and_rolls_without_losing_capacity(build):
    _, objects = build
    spec = deployment(objects)["spec"]
    assert spec["replicas"] >= 2
    for name in DEPLOYMENTS:
        spec = deployment(objects, name)["spec"]
        assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name
        assert labels_match(spec["selector"], spec["template"]["metadata"]["labels"]), name


def test_the_webhook_and_the_operator_pages_run_in_deployments_of_their_own(build):
    """Two Deployments of one image: no operator request can take a webhook Pod's thread or CPU (issue 33)."""
    _, objects = build
    webhook_pod, operator_pod = (deployment(objects, name)["spec"]["template"] for name in DEPLOYMENTS)
    assert env_value(injector_container(objects), "INJECTOR_ROLE") == "webhook"
    assert env_value(injector_container(objects, OPERATOR), "INJECTOR_ROLE") == "operator"
    assert injector_container(objects)["image"] == injector_container(objects, OPERATOR)["image"]
    # neither selects the other's Pods
    for name, other in ((NAME, operator_pod), (OPERATOR, webhook_pod)):
        assert not labels_match(deployment(objects, name)["spec"]["selector"], other["metadata"]["labels"]), name
    # the webhook's PDB, HPA and NetworkPolicy are its own
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        selector = find_object(objects, kind, NAME)["spec"].get("selector") or \
            find_object(objects, kind, NAME)["spec"]["podSelector"]
        assert labels_match(selector, webhook_pod["metadata"]["labels"]), kind
        assert not labels_match(selector, operator_pod["metadata"]["labels"]), kind
    assert labels_match(find_object(objects, "NetworkPolicy", OPERATOR)["spec"]["podSelector"],
                        operator_pod["metadata"]["labels"])


def all_containers(objects):  # the webhook's
    pod_spec = deployment(objects)["spec"]["template"]["spec"]
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


def pod_specs(objects):
    """(name, pod spec) of every workload: Deployments, StatefulSets and CronJobs."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_every_container_has_requests_and_limits(build):
    _, objects = build
    for name, pod_spec in pod_specs(objects):
        for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
            for section in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][section]), f"{name}/{c['name']} {section}"


def test_every_container_is_locked_down(build):
    _, objects = build
    assert {"Deployment", "CronJob"} <= {o["kind"] for o in objects}
    for name, pod_spec in pod_specs(objects):
        assert pod_spec["securityContext"]["runAsNonRoot"] is True
        assert pod_spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod_spec.get("automountServiceAccountToken") is False
        for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
            sc = c["securityContext"]
            where = f"{name}/{c['name']}"
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert not sc.get("privileged"), where
            assert "add" not in sc["capabilities"], where
    # the image's user (Dockerfile: USER 10001:10001)
    assert deployment(objects)["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001


@pytest.mark.parametrize("name, port", [(NAME, "https"), (OPERATOR, "https-ui")])
def test_probes_use_https_on_the_pods_own_port(build, name, port):
    _, objects = build
    container = injector_container(objects, name)
    ports = {p["name"] for p in container["ports"]}
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["scheme"] == "HTTPS", probe
        assert get["port"] == port and ports == {port}, probe
        paths[probe] = get["path"]
    assert paths["livenessProbe"] == "/healthz"
    assert paths["readinessProbe"] == "/readyz"
    assert container["readinessProbe"]["timeoutSeconds"] <= 5


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_writable_paths_are_empty_dirs_the_app_is_told_about(build, name):
    _, objects = build
    pod_spec = deployment(objects, name)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    container = injector_container(objects, name)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]  # also the heavy requests' slots (injector_site/platform/heavy.py)
    assert "emptyDir" in volumes[mounts[env_value(container, "PROMETHEUS_MULTIPROC_DIR")]]
    if name == OPERATOR:  # it writes no audit rows (injector_site/platform/roles.py): no spool
        return
    for env_name in ("PROMETHEUS_MULTIPROC_DIR", "INJECTOR_AUDIT_SPOOL_DIR"):
        path = env_value(container, env_name)
        assert path in mounts, f"{env_name}={path} is not a mounted volume"
        assert "emptyDir" in volumes[mounts[path]], env_name
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # the spool is on disk (survives a container restart without counting as memory)
    assert volumes[mounts[env_value(container, "INJECTOR_AUDIT_SPOOL_DIR")]]["emptyDir"].get("medium") != "Memory"


@pytest.mark.parametrize("deployment_name", DEPLOYMENTS)
def test_secrets_reach_the_app_as_files(build, deployment_name):
    name, objects = build
    container = injector_container(objects, deployment_name)
    pod_spec = deployment(objects, deployment_name)["spec"]["template"]["spec"]
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod_spec["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    clusters = [o for o in objects if o["kind"] == "Cluster"]
    if clusters:
        # CloudNativePG: the database owner's Secret, which the operator creates (<cluster>-app)
        database_files = [("DB_NAME_FILE", "dbname"), ("DB_USER_FILE", "username"), ("DB_PASSWORD_FILE", "password"),
                          ("DATABASE_DIRECT_URL_FILE", "uri")]
        operator_secrets = {"volcano-injector-django", f"{clusters[0]['metadata']['name']}-app"}
        assert not [e for e in container["env"] if e["name"] == "DATABASE_URL_FILE"]
    else:
        database_files = [("DATABASE_URL_FILE", "DATABASE_URL")]
        operator_secrets = {"volcano-injector-db", "volcano-injector-django"}
    for env_name, key in [("DJANGO_SECRET_KEY_FILE", "secret-key"), *database_files]:
        path = env_value(container, env_name)
        assert posixpath.basename(path) == key
        volume = mounts[posixpath.dirname(path)]
        assert volume in secret_volumes, env_name
        secret_name = secret_volumes[volume]
        generated = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == secret_name]
        if name.startswith("overlays/trial"):
            assert generated and key in generated[0]["data"], f"trial generates {secret_name}"
        else:
            # production: the operator (or CloudNativePG) creates these Secrets (deploy/README.md)
            assert not generated
            assert secret_name in operator_secrets


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_migrations_run_in_an_init_container_of_the_same_image(build, name):
    _, objects = build
    pod_spec = deployment(objects, name)["spec"]["template"]["spec"]
    (migrate,) = pod_spec["initContainers"]
    assert migrate["command"] == ["python", "manage.py", "apply_migrations"]
    assert migrate["image"] == injector_container(objects, name)["image"]
    # the app writes Prometheus files as soon as it loads: the directory the image
    # names must exist in the init container too
    from .test_image import image_env

    metrics_dir = image_env()["PROMETHEUS_MULTIPROC_DIR"]
    assert metrics_dir in {m["mountPath"] for m in migrate["volumeMounts"]}
    main_env = {e["name"]: e.get("value") for e in injector_container(objects, name)["env"]}
    for e in migrate["env"]:
        if e["name"].endswith("_FILE"):
            assert main_env[e["name"]] == e["value"]


def test_retention_runs_nightly_with_the_webhooks_image_settings_and_secrets(build):
    _, objects = build
    cron = find_object(objects, "CronJob", "volcano-injector-retention")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job_pod["restartPolicy"] == "Never"
    (prune,) = job_pod["containers"]
    assert prune["command"] == ["python", "manage.py", "prune_audit"]
    assert (REPO_ROOT / "mutations" / "management" / "commands" / "prune_audit.py").is_file()
    webhook_pod = deployment(objects)["spec"]["template"]["spec"]
    webhook = injector_container(objects)
    assert prune["image"] == webhook["image"]
    assert prune["envFrom"] == webhook["envFrom"]  # AUDIT_RETENTION_DAYS and the rest
    # the same Secrets, at the same paths, named by the same *_FILE variables
    webhook_secrets = {v["name"]: v["secret"]["secretName"] for v in webhook_pod["volumes"] if "secret" in v}
    job_secrets = {v["name"]: v["secret"]["secretName"] for v in job_pod["volumes"] if "secret" in v}
    webhook_mounts = {m["mountPath"]: m["name"] for m in webhook["volumeMounts"]}
    job_mounts = {m["mountPath"]: m["name"] for m in prune["volumeMounts"]}
    for e in prune["env"]:
        assert e["name"].endswith("_FILE")
        assert env_value(webhook, e["name"]) == e["value"]
        directory = posixpath.dirname(e["value"])
        assert job_secrets[job_mounts[directory]] == webhook_secrets[webhook_mounts[directory]]
    # writable paths (read-only root): /tmp and the metrics directory the image names
    from .test_image import image_env

    job_volumes = {v["name"]: v for v in job_pod["volumes"]}
    for path in ("/tmp", image_env()["PROMETHEUS_MULTIPROC_DIR"]):
        assert "emptyDir" in job_volumes[job_mounts[path]], path


@pytest.mark.parametrize("name", QUOTA_BUILDS)
def test_quota_job_runs_sync_quotas_with_the_webhooks_image_settings_and_secrets(builds, name):
    objects = builds[name]
    cron = find_object(objects, "CronJob", QUOTA_JOB)
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["schedule"] == "*/5 * * * *"  # deploy/README.md and the README say "within 5 minutes"
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (sync,) = job_pod["containers"]
    assert sync["command"] == ["python", "manage.py", "sync_quotas"]
    assert (REPO_ROOT / "profiles" / "management" / "commands" / "sync_quotas.py").is_file()
    webhook = injector_container(objects)
    assert sync["image"] == webhook["image"]
    assert sync["envFrom"] == webhook["envFrom"]
    # the database and Django Secrets, at the same paths, named by the same *_FILE variables
    job_secrets = {v["name"]: v["secret"]["secretName"] for v in job_pod["volumes"] if "secret" in v}
    webhook_secrets = {v["name"]: v["secret"]["secretName"]
                       for v in deployment(objects)["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    job_mounts = {m["mountPath"]: m["name"] for m in sync["volumeMounts"]}
    webhook_mounts = {m["mountPath"]: m["name"] for m in webhook["volumeMounts"]}
    database_files = ({"DB_NAME_FILE", "DB_USER_FILE", "DB_PASSWORD_FILE", "DATABASE_DIRECT_URL_FILE"}
                      if any(o["kind"] == "Cluster" for o in objects) else {"DATABASE_URL_FILE"})  # CloudNativePG's
    assert {e["name"] for e in sync["env"]} == {"DJANGO_SECRET_KEY_FILE", *database_files}
    for e in sync["env"]:
        assert env_value(webhook, e["name"]) == e["value"]
        directory = posixpath.dirname(e["value"])
        assert job_secrets[job_mounts[directory]] == webhook_secrets[webhook_mounts[directory]]


@pytest.mark.parametrize("name", QUOTA_BUILDS)
def test_only_the_quota_job_gets_an_api_token_and_for_its_own_service_account(builds, name):
    objects = builds[name]
    job_pod = find_object(objects, "CronJob", QUOTA_JOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = find_object(objects, "ServiceAccount", job_pod["serviceAccountName"])
    assert account["metadata"]["namespace"] == NAMESPACE
    (token,) = [v for v in job_pod["volumes"] if "projected" in v]
    sources = token["projected"]["sources"]
    assert any(s.get("serviceAccountToken", {}).get("expirationSeconds", 0) <= 3600 for s in sources)
    mounts = {m["mountPath"]: m["name"] for m in job_pod["containers"][0]["volumeMounts"]}
    # where the kubernetes client's in-cluster configuration reads it (injector_site/platform/kube.py)
    assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"] == token["name"]
    for other, pod_spec in pod_specs(objects):
        if other != QUOTA_JOB:
            assert not any("projected" in v for v in pod_spec.get("volumes", [])), other
            assert pod_spec.get("serviceAccountName") != account["metadata"]["name"], other


@pytest.mark.parametrize("name", QUOTA_BUILDS)
def test_quota_rbac_reaches_only_namespaces_and_its_own_quotas(builds, name):
    objects = builds[name]
    role = find_object(objects, "ClusterRole", QUOTA_JOB)
    granted = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]
        assert "*" not in rule["resources"] and "*" not in rule["verbs"]
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                granted.add((resource, verb, tuple(rule.get("resourceNames", ()))))
    assert granted == {
        ("namespaces", "list", ()), ("resourcequotas", "list", ()), ("resourcequotas", "create", ()),
        ("resourcequotas", "update", ("volcano-injector-vgpu",)),
        ("resourcequotas", "delete", ("volcano-injector-vgpu",)),
    }
    binding = find_object(objects, "ClusterRoleBinding", QUOTA_JOB)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": QUOTA_JOB}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": QUOTA_JOB, "namespace": NAMESPACE}]


def test_builds_without_a_component_that_reads_the_api_grant_no_api_access(build):
    """Only the quotas, unconverted-pods, gpu-inventory and policy-reports components grant API access, each
    to its own CronJob's account, and serving-groups to the webhook's account (get on Pods:
    test_serving_groups_let_the_webhook_get_pods_only)."""
    name, objects = build
    rbac = [o for o in objects if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    granted_to = {s["name"] for o in rbac if o["kind"].endswith("Binding") for s in o["subjects"]}
    expected = set()
    if name in QUOTA_BUILDS:
        expected.add(QUOTA_JOB)
    if "unconverted-pods" in name:
        expected.add("volcano-injector-unconverted-pods")
    if "serving-groups" in name:
        expected.add(NAME)
    if "gpu-inventory" in name:
        expected.add("volcano-injector-gpu-inventory")
    if "policy-reports" in name:
        expected.add("volcano-injector-policy-reports")
    assert granted_to == expected
    assert bool(rbac) == bool(expected)


def test_serving_groups_let_the_webhook_get_pods_only(build):
    """The leader lookup: the webhook's account may get Pods and nothing else, with a short-lived token mounted, and
    the lookup switched on; without the component no token is mounted and the lookup stays off."""
    name, objects = build
    container = injector_container(objects)
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    config = find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"]
    if "serving-groups" not in name:
        assert "kube-api-access" not in mounts
        assert config.get("INJECTOR_GROUP_LEADER_LOOKUP", "false") == "false"
        return
    role = find_object(objects, "ClusterRole", "volcano-injector-group-leaders")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    binding = find_object(objects, "ClusterRoleBinding", "volcano-injector-group-leaders")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert mounts["kube-api-access"]["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    volumes = {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    token = volumes["kube-api-access"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["expirationSeconds"] <= 3600
    assert config["INJECTOR_GROUP_LEADER_LOOKUP"] == "true"


@pytest.mark.parametrize("name, service", [(NAME, NAME), (OPERATOR, UI_SERVICE)])
def test_allowed_hosts_cover_the_service_and_the_pod_ip(build, name, service):
    _, objects = build
    container = injector_container(objects, name)
    hosts = env_value(container, "DJANGO_ALLOWED_HOSTS").split(",")
    assert f"{service}.{NAMESPACE}.svc" in hosts
    # kubelet probes and Prometheus send Host: <pod IP>:<port>
    assert "$(POD_IP)" in hosts
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("DJANGO_ALLOWED_HOSTS"), "$(POD_IP) must be defined first"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_termination_leaves_time_for_the_graceful_shutdown(build, name):
    _, objects = build
    pod_spec = deployment(objects, name)["spec"]["template"]["spec"]
    container = injector_container(objects, name)
    config = find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"]
    pre_stop_seconds = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pre_stop_seconds + int(config["GUNICORN_GRACEFUL_TIMEOUT"]) < pod_spec["terminationGracePeriodSeconds"]


# --- Services, PDB, HPA, NetworkPolicy -------------------------------------------


def test_ui_has_its_own_service_on_the_operator_deployments_port(build):
    _, objects = build
    ui = find_object(objects, "Service", UI_SERVICE)
    webhook_service = find_object(objects, "Service", NAME)
    assert ui["spec"]["ports"][0]["targetPort"] == "https-ui"
    assert {p["targetPort"] for p in webhook_service["spec"]["ports"]} == {"https"}
    for service, name, other in ((ui, OPERATOR, NAME), (webhook_service, NAME, OPERATOR)):
        container = injector_container(objects, name)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        binds = env_value(container, "GUNICORN_BIND").split(",")
        assert sorted(int(b.rsplit(":", 1)[1]) for b in binds) == sorted(ports.values()), name
        assert labels_match({"matchLabels": service["spec"]["selector"]},
                            deployment(objects, name)["spec"]["template"]["metadata"]["labels"]), name
        assert not labels_match({"matchLabels": service["spec"]["selector"]},
                                deployment(objects, other)["spec"]["template"]["metadata"]["labels"]), name


def test_pod_disruption_budget_and_autoscaler_keep_two_pods(build):
    _, objects = build
    labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    pdb = find_object(objects, "PodDisruptionBudget", NAME)
    assert labels_match(pdb["spec"]["selector"], labels)
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable", 0) >= 1
    hpa = find_object(objects, "HorizontalPodAutoscaler", NAME)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
    assert deployment(objects)["spec"]["replicas"] >= hpa["spec"]["minReplicas"]


def webhook_sources(objects) -> list[dict] | None:
    """The peers the webhook's NetworkPolicy admits to the webhook port (None: every source)."""
    policy = find_object(objects, "NetworkPolicy", NAME)
    rules = [r for r in policy["spec"]["ingress"] if any(p["port"] == "https" for p in r["ports"])]
    # the first: the API server's (components/monitoring adds one for Prometheus' namespace after it)
    assert all("ipBlock" not in str(r) for r in rules[1:])
    return rules[0].get("from")


def test_network_policies_let_the_api_server_reach_the_webhook_port_and_only_ui_clients_the_ui(build):
    _, objects = build
    for name, port in ((NAME, "https"), (OPERATOR, "https-ui")):
        policy = find_object(objects, "NetworkPolicy", name)
        pod_labels = deployment(objects, name)["spec"]["template"]["metadata"]["labels"]
        assert labels_match(policy["spec"]["podSelector"], pod_labels), name
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert {p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]} == {port}, name
    # The API server is no Pod: the webhook port admits it by address range, or every source with mTLS.
    sources = webhook_sources(objects)
    assert sources is None or all(set(peer) == {"ipBlock"} for peer in sources)
    # The UI port only labelled clients.
    for ui_rule in find_object(objects, "NetworkPolicy", OPERATOR)["spec"]["ingress"]:
        assert ui_rule["from"] and "ipBlock" not in str(ui_rule)


PRODUCTION_OVERLAYS = ["overlays/production", "overlays/production-mtls", "overlays/production-managed",
                       "overlays/cloudnative-pg"]


@pytest.mark.parametrize("name", PRODUCTION_OVERLAYS)
def test_production_overlays_as_shipped_answer_the_webhook_only_to_the_api_server(builds, name):
    """mTLS (a client certificate only cert-manager issues), or a NetworkPolicy admitting only the control
    plane's range: never the webhook port open to every source without mTLS (issue 33)."""
    objects = builds[name]
    mtls = "TLS_CLIENT_CA_FILE" in {e["name"] for e in injector_container(objects)["env"]}
    sources = webhook_sources(objects)
    if not mtls:
        assert sources, f"{name}: the webhook port is open to every source without mTLS"
    for peer in sources or []:
        assert peer["ipBlock"]["cidr"] not in ("0.0.0.0/0", "::/0"), name


def test_trial_database_is_reachable_under_the_name_in_database_url(builds):
    objects = builds["overlays/trial"]
    import base64

    db_secret = find_prefixed(objects, "Secret", "volcano-injector-db")
    url = urlparse(base64.b64decode(db_secret["data"]["DATABASE_URL"]).decode())
    assert url.scheme == "postgres"
    service_name, namespace = url.hostname.split(".")[:2]
    service = find_object(objects, "Service", service_name)
    assert namespace == service["metadata"]["namespace"]
    assert url.port == service["spec"]["ports"][0]["port"]
    statefulset = find_object(objects, "StatefulSet", service_name)
    assert statefulset["spec"]["replicas"] == 1
    assert labels_match({"matchLabels": service["spec"]["selector"]},
                        statefulset["spec"]["template"]["metadata"]["labels"])
    pg_env = find_prefixed(objects, "Secret", "volcano-injector-postgresql")["data"]
    assert base64.b64decode(pg_env["POSTGRES_PASSWORD"]).decode() == url.password
    assert base64.b64decode(pg_env["POSTGRES_USER"]).decode() == url.username
    assert base64.b64decode(pg_env["POSTGRES_DB"]).decode() == url.path.lstrip("/")
    # the injector may reach it through its NetworkPolicy
    policy = find_object(objects, "NetworkPolicy", service_name)
    (rule,) = policy["spec"]["ingress"]
    assert labels_match(rule["from"][0]["podSelector"], deployment(objects)["spec"]["template"]["metadata"]["labels"])


def test_production_names_an_image_from_a_registry(builds):
    image = injector_container(builds["overlays/production"])["image"]
    assert "/" in image and ":" in image.rsplit("/", 1)[1]
    assert not image.endswith(":latest")


def test_schema_validation_catches_a_misspelt_field(builds):
    """The schema check above is strict: a typo in a Deployment field fails it."""
    import copy

    broken = copy.deepcopy(deployment(builds["overlays/production"]))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_probe_and_webhook_paths_are_real_endpoints_of_the_app(build):
    """Every path the cluster calls resolves to a view of the app's URLconf."""
    from django.urls import Resolver404, resolve

    _, objects = build
    container = injector_container(objects)
    _, hook = webhook(objects)
    paths = {hook["clientConfig"]["service"]["path"]}
    for name in DEPLOYMENTS:
        container = injector_container(objects, name)
        paths |= {container[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    expected_views = {"/mutate": "mutate", "/healthz": "healthz", "/readyz": "readyz"}
    for path in sorted(paths):
        try:
            match = resolve(path)
        except Resolver404:
            pytest.fail(f"{path} (called by the cluster) does not resolve in injector_site.urls")
        assert match.url_name == expected_views[path], (path, match.url_name)


def test_readme_covers_install_operations_and_the_errors_operators_hit():
    from .conftest import DEPLOY_DIR

    text = (DEPLOY_DIR / "README.md").read_text()
    for heading in ("## Install from zero", "## Verify with a test Pod", "## Upgrade", "## Roll back", "## Uninstall",
                    "## Troubleshooting"):
        assert heading in text, heading
    assert text.index("cert-manager") < text.index("kubectl apply -k deploy/overlays/production")
    for error in ("x509: certificate signed by unknown authority", 'service "volcano-injector" not found',
                  "Required value", "context deadline exceeded"):
        assert error in text, error
    for word in ("nvidia/cuda", "nvidia.com/gpu: 1", "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory",
                 "INJECTOR_FAILURE_POLICY", "emptyDir"):
        assert word in text, word


def test_mtls_component_has_cert_manager_issue_the_client_ca_and_the_api_servers_certificate(builds):
    objects = builds["overlays/production"]
    ca = find_object(objects, "Certificate", "volcano-injector-client-ca")
    assert ca["spec"]["isCA"] is True and ca["spec"]["secretName"] == "volcano-injector-client-ca"
    issuer = find_object(objects, "Issuer", "volcano-injector-client-ca")
    assert issuer["spec"]["ca"]["secretName"] == "volcano-injector-client-ca"
    client = find_object(objects, "Certificate", "volcano-injector-apiserver-client")
    assert client["spec"]["issuerRef"]["name"] == "volcano-injector-client-ca"
    assert "client auth" in client["spec"]["usages"] and "server auth" not in client["spec"]["usages"]
    # The serving CA is another one: a client certificate cannot come from the serving chain.
    assert find_object(objects, "Certificate", "volcano-injector-serving")["spec"]["issuerRef"]["name"] != \
        "volcano-injector-client-ca"


def test_production_mtls_overlay_is_production_which_has_mtls(builds):
    overlay, production = builds["overlays/production-mtls"], builds["overlays/production"]
    assert overlay == production
    assert find_object(production, "Certificate", "volcano-injector-apiserver-client")


def test_managed_overlay_opens_the_webhook_port_to_the_control_plane_range_it_names(kubectl, tmp_path):
    import shutil

    from .conftest import DEPLOY_DIR, kustomize_build

    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY_DIR, copy)
    overlay = copy / "overlays" / "production-managed" / "kustomization.yaml"
    text = overlay.read_text()
    assert "WEBHOOK_SOURCE_CIDR=192.0.2.0/24" in text
    overlay.write_text(text.replace("WEBHOOK_SOURCE_CIDR=192.0.2.0/24", "WEBHOOK_SOURCE_CIDR=172.16.0.0/28"))
    objects = kustomize_build(kubectl, overlay.parent)
    assert webhook_sources(objects) == [{"ipBlock": {"cidr": "172.16.0.0/28"}}]
    ui_rule = find_object(objects, "NetworkPolicy", OPERATOR)["spec"]["ingress"][0]
    assert "ipBlock" not in str(ui_rule)  # the UI port keeps its own peers


def test_managed_overlay_as_shipped_admits_a_documentation_range_until_the_operator_sets_the_control_planes(builds):
    # 192.0.2.0/24 (RFC 5737) matches no host: nothing reaches the webhook until WEBHOOK_SOURCE_CIDR is set,
    # and the opt-out (0.0.0.0/0) is a change the operator makes knowingly (deploy/README.md).
    assert webhook_sources(builds["overlays/production-managed"]) == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]


def test_rightsizing_job_runs_recommend_sizes_daily_without_api_access(builds):
    objects = builds["overlays/production+rightsizing"]
    job = find_object(objects, "CronJob", "volcano-injector-rightsizing")
    spec = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["command"] == ["python", "manage.py", "recommend_sizes"]
    assert container["image"] == injector_container(objects)["image"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert {e["name"] for e in container["env"]} >= {"DJANGO_SECRET_KEY_FILE", "DATABASE_URL_FILE", "PROMETHEUS_URL"}
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
