"""deploy/components/cloudnative-pg (and -backup): the custom resources validate against the CRD schemas
of the pinned releases (tests/deploy/crds), and the webhook is wired to the pooler and the Secret
CloudNativePG creates."""

from __future__ import annotations

import copy
import json
import posixpath
from pathlib import Path
from urllib.parse import urlsplit

import celpy
import jsonschema
import pytest

from .conftest import find_object, find_prefixed

SCHEMAS = Path(__file__).parent / "crds"  # the *.json schemas; the *.yaml CRDs are for test_monitoring_manifests.py
# API groups whose objects are validated here, each against a schema file <group>_<version>_<kind>.json.
CUSTOM_GROUPS = {"postgresql.cnpg.io", "barmancloud.cnpg.io", "monitoring.coreos.com"}
CNPG_BUILDS = ["overlays/cloudnative-pg", "overlays/production+cloudnative-pg+cloudnative-pg-backup",
               "overlays/production+quotas+cloudnative-pg"]
BACKUP_BUILD = "overlays/production+cloudnative-pg+cloudnative-pg-backup"
BARMAN_PLUGIN = "barman-cloud.cloudnative-pg.io"
OPERATOR_NAMESPACE = "cnpg-system"


@pytest.fixture(params=CNPG_BUILDS)
def build(request, builds):
    return request.param, builds[request.param]


def one(objects: list[dict], kind: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def pod_template(objects: list[dict], kind: str, name: str) -> dict:
    obj = find_object(objects, kind, name)
    spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    return spec["template"]["spec"]


def containers(objects: list[dict]) -> list[dict]:
    """The containers of the webhook's Pod and of the retention job."""
    webhook = pod_template(objects, "Deployment", "volcano-injector")
    retention = pod_template(objects, "CronJob", "volcano-injector-retention")
    return webhook["initContainers"] + webhook["containers"] + retention["containers"]


# --- schemas ---------------------------------------------------------------------------------------


def strict(schema: dict) -> dict:
    """The schema with unknown fields refused, as `kubectl apply` (strict field validation) refuses them."""
    schema = copy.deepcopy(schema)

    def visit(node: object) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


def crd_schema(obj: dict) -> dict:
    group, version = obj["apiVersion"].split("/")
    path = SCHEMAS / f"{group}_{version}_{obj['kind'].lower()}.json"
    assert path.is_file(), f"no CRD schema for {obj['apiVersion']} {obj['kind']} in {SCHEMAS}"
    return json.loads(path.read_text())


_CEL = celpy.Environment()


def cel_violations(schema: dict, value: object, where: str = "") -> list[str]:
    """The messages of the x-kubernetes-validations rules (CEL) that `value` breaks. Transition rules
    (oldSelf: immutable fields) concern updates and are left out."""
    found = []
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue
        program = _CEL.program(_CEL.compile(rule["rule"]))
        result = program.evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(result, celpy.CELEvalError) or not bool(result):
            found.append(f"{where or '.'}: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                found += cel_violations(child, item, f"{where}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += cel_violations(schema["items"], item, f"{where}[{index}]")
    return found


def schema_errors(obj: dict) -> list[str]:
    schema = crd_schema(obj)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(strict(schema)).iter_errors(obj)]
    return errors + cel_violations(schema, obj)


def test_every_custom_resource_validates_against_its_crd_schema(build):
    name, objects = build
    custom = [o for o in objects if o["apiVersion"].split("/")[0] in CUSTOM_GROUPS]
    assert {"Cluster", "Pooler", "PodMonitor"} <= {o["kind"] for o in custom}
    for obj in custom:
        assert schema_errors(obj) == [], f"{name}: {obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(instance=spec.pop("instances")), "Additional properties are not allowed ('instance'"),
    (lambda spec: spec["postgresql"]["synchronous"].update(method="all"), "'all' is not one of ['any', 'first']"),
    (lambda spec: spec["postgresql"]["synchronous"].update(number=0),
     "The number of synchronous replicas should be greater than zero"),
])
def test_crd_schema_validation_catches_what_the_api_server_would_refuse(builds, change, message):
    cluster = copy.deepcopy(one(builds["overlays/cloudnative-pg"], "Cluster"))
    change(cluster["spec"])
    assert any(message in error for error in schema_errors(cluster)), schema_errors(cluster)


def test_the_schemas_readme_names_the_release_and_source_of_every_schema():
    readme = (SCHEMAS / "README.md").read_text()
    for path in SCHEMAS.glob("*.json"):
        assert f"`{path.name}`" in readme, path.name
    for source in ("cloudnative-pg/cloudnative-pg", "v1.30.0", "cloudnative-pg/plugin-barman-cloud", "v0.14.0",
                   "prometheus-operator/prometheus-operator", "v0.93.0"):
        assert source in readme, source


# --- the database ----------------------------------------------------------------------------------


def test_the_cluster_runs_three_instances_with_a_synchronous_standby_required(build):
    _, objects = build
    spec = one(objects, "Cluster")["spec"]
    assert spec["instances"] == 3
    assert spec["postgresql"]["synchronous"] == {"method": "any", "number": 1, "dataDurability": "required",
                                                 "failoverQuorum": True}
    assert "minSyncReplicas" not in spec and "maxSyncReplicas" not in spec  # the deprecated way
    assert spec["affinity"]["enablePodAntiAffinity"] is True
    assert spec["resources"]["requests"] == spec["resources"]["limits"]  # Guaranteed QoS
    assert spec["storage"]["size"] and spec["walStorage"]["size"]
    # the image has no in-tree Barman: backups go through the plugin
    assert "-standard-" in spec["imageName"] or "-minimal-" in spec["imageName"]


def test_the_webhook_connects_through_the_pooler_in_transaction_mode(build):
    _, objects = build
    cluster, pooler = one(objects, "Cluster"), one(objects, "Pooler")
    assert pooler["spec"]["cluster"]["name"] == cluster["metadata"]["name"]
    assert pooler["spec"]["type"] == "rw" and pooler["spec"]["instances"] >= 2
    settings = find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"]
    # CloudNativePG names the Pooler's Service after the Pooler, port 5432
    assert settings["DB_HOST"] == f"{pooler['metadata']['name']}.{pooler['metadata']['namespace']}.svc"
    assert settings["DB_PORT"] == "5432"
    assert settings["DB_POOL_MODE"] == pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"


def test_every_database_client_reads_the_owners_secret_and_the_direct_url(build):
    """Every container that mounts the database Secret (the webhook, its migrate step, the retention job,
    the quotas job when that component is in the build) reads CloudNativePG's one."""
    name, objects = build
    cluster = one(objects, "Cluster")
    app_secret = f"{cluster['metadata']['name']}-app"  # what CloudNativePG creates for the initdb owner
    expected = {"DB_NAME_FILE": "dbname", "DB_USER_FILE": "username", "DB_PASSWORD_FILE": "password",
                "DATABASE_DIRECT_URL_FILE": "uri"}
    clients = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "CronJob"):
            continue
        pod = pod_template(objects, obj["kind"], obj["metadata"]["name"])
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod.get("initContainers", []) + pod["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            if "db" not in mounts.values():
                continue
            clients.append(container["name"])
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert "DATABASE_URL_FILE" not in env, container["name"]
            for variable, key in expected.items():
                path = env[variable]
                assert posixpath.basename(path) == key, (container["name"], variable)
                assert volumes[mounts[posixpath.dirname(path)]]["secret"]["secretName"] == app_secret
    assert {"migrate", "injector", "prune"} <= set(clients)
    if "quotas" in name:
        assert "sync" in clients


def test_the_app_reads_this_build_as_a_pooled_database_with_a_direct_url(builds, tmp_path, monkeypatch):
    """The settings parser, given what the build mounts and sets, connects to the pooler and migrates around it."""
    from injector_site.platform.database import database_from_env, direct_database_from_env, pool_mode_from_env

    objects = builds["overlays/cloudnative-pg"]
    cluster = one(objects, "Cluster")
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    owner, database, namespace = initdb["owner"], initdb["database"], cluster["metadata"]["namespace"]
    rw_service = f"{cluster['metadata']['name']}-rw"
    rw_host = f"{rw_service}.{namespace}"
    # the Secret as CloudNativePG writes it (pkg/specs/secrets.go)
    secret = {"dbname": database, "username": owner, "password": "generated", "host": rw_service, "port": "5432",
              "uri": f"postgresql://{owner}:generated@{rw_host}:5432/{database}"}
    for key, value in secret.items():
        (tmp_path / key).write_text(value)
    injector = next(c for c in containers(objects) if c["name"] == "injector")
    for key, value in find_prefixed(objects, "ConfigMap", "volcano-injector-config")["data"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for e in injector["env"]:
        if e["name"].startswith(("DB_", "DATABASE_")):
            monkeypatch.setenv(e["name"], str(tmp_path / posixpath.basename(e["value"])))
    pooled, direct = database_from_env(tmp_path), direct_database_from_env()
    assert (pooled["HOST"], pooled["PORT"], pooled["NAME"], pooled["USER"], pooled["PASSWORD"]) == (
        one(objects, "Pooler")["metadata"]["name"] + f".{namespace}.svc", "5432", database, owner, "generated")
    assert (direct["HOST"], direct["NAME"], direct["USER"]) == (rw_host, database, owner)
    assert pool_mode_from_env() == "transaction"
    assert urlsplit(secret["uri"]).hostname == rw_host


# --- monitoring and network ---------------------------------------------------------------------------


def test_pod_monitors_scrape_the_instances_and_the_poolers(build):
    _, objects = build
    cluster, pooler = one(objects, "Cluster"), one(objects, "Pooler")
    monitors = [o for o in objects if o["kind"] == "PodMonitor"]
    selected = {tuple(sorted(m["spec"]["selector"]["matchLabels"].items())) for m in monitors}
    # labels CloudNativePG puts on its Pods (pkg/specs, pkg/utils/labels_annotations.go)
    assert selected == {
        (("cnpg.io/cluster", cluster["metadata"]["name"]), ("cnpg.io/podRole", "instance")),
        (("cnpg.io/poolerName", pooler["metadata"]["name"]),),
    }
    assert all(m["spec"]["podMetricsEndpoints"] == [{"port": "metrics"}] for m in monitors)
    assert not cluster["spec"].get("monitoring", {}).get("enablePodMonitor")  # deprecated in 1.30


def test_network_policies_open_the_pooler_to_the_injector_and_the_instances_to_the_operator(build):
    _, objects = build
    cluster, pooler = one(objects, "Cluster"), one(objects, "Pooler")
    instances = find_object(objects, "NetworkPolicy", cluster["metadata"]["name"])
    poolers = find_object(objects, "NetworkPolicy", pooler["metadata"]["name"])
    assert instances["spec"]["podSelector"]["matchLabels"] == {"cnpg.io/cluster": cluster["metadata"]["name"],
                                                               "cnpg.io/podRole": "instance"}
    assert poolers["spec"]["podSelector"]["matchLabels"] == {"cnpg.io/poolerName": pooler["metadata"]["name"]}
    injector = find_object(objects, "Deployment", "volcano-injector")["spec"]["template"]["metadata"]["labels"]
    retention = find_object(objects, "CronJob", "volcano-injector-retention")["spec"]["jobTemplate"]["spec"][
        "template"]["metadata"]["labels"]

    def admitted(policy: dict, port: int, labels: dict, namespace: str = "gpustack") -> bool:
        """Whether a Pod with these labels in that namespace may connect to the port."""
        for rule in policy["spec"]["ingress"]:
            if rule.get("ports") and port not in [p["port"] for p in rule["ports"]]:
                continue
            for peer in rule.get("from", [{}]):
                in_namespace = ("namespaceSelector" not in peer and namespace == "gpustack") or (
                    peer.get("namespaceSelector", {}).get("matchLabels", {}).items()
                    <= {"kubernetes.io/metadata.name": namespace}.items())
                if in_namespace and peer.get("podSelector", {}).get("matchLabels", {}).items() <= labels.items():
                    return True
        return False

    pooler_pod = {"cnpg.io/cluster": cluster["metadata"]["name"], "cnpg.io/poolerName": pooler["metadata"]["name"]}
    operator_pod = {"app.kubernetes.io/name": "cloudnative-pg"}
    assert admitted(poolers, 5432, injector) and admitted(poolers, 5432, retention)
    assert admitted(instances, 5432, pooler_pod), "the pooler reaches the primary"
    assert admitted(instances, 5432, injector), "migrations reach the primary on DATABASE_DIRECT_URL"
    assert admitted(instances, 8000, operator_pod, OPERATOR_NAMESPACE), "the operator's status checks"
    assert not admitted(instances, 5432, {"app": "someone-else"})
    assert not admitted(poolers, 5432, {"app": "someone-else"})


# --- backups ------------------------------------------------------------------------------------------


def test_backup_component_archives_wal_and_schedules_base_backups_to_the_object_store(builds):
    objects = builds[BACKUP_BUILD]
    cluster, store, schedule = one(objects, "Cluster"), one(objects, "ObjectStore"), one(objects, "ScheduledBackup")
    (plugin,) = cluster["spec"]["plugins"]
    assert plugin == {"name": BARMAN_PLUGIN, "isWALArchiver": True,
                      "parameters": {"barmanObjectName": store["metadata"]["name"]}}
    assert schedule["spec"]["cluster"]["name"] == cluster["metadata"]["name"]
    assert schedule["spec"]["method"] == "plugin"
    assert schedule["spec"]["pluginConfiguration"]["name"] == BARMAN_PLUGIN
    assert len(schedule["spec"]["schedule"].split()) == 6  # CloudNativePG's cron has seconds first
    assert store["spec"]["retentionPolicy"] and store["spec"]["configuration"]["destinationPath"].startswith("s3://")
    assert "backup" not in cluster["spec"]  # the in-tree barmanObjectStore, deprecated
    assert "plugins" not in one(builds["overlays/cloudnative-pg"], "Cluster")["spec"], "backups are opt-in"
