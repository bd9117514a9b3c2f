"""manage.py export_configuration and check_pods: the webhook's decision offline, equal to /mutate's."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from mutations.engine import admission
from mutations.engine.configuration import ConfigurationError, catalog_document, catalog_from_document
from mutations.engine.groups import group_leader_wanted
from mutations.engine.workloads import manifest_pods
from profiles.catalog import catalog_build
from profiles.models import GpuModel, NamespacePolicy, Preset
from tests.support import pods
from tests.support.kube import apply_patch_v4, decode_patch, default_pod

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "tests" / "fixtures" / "manifests"
CLOSED_PORT_DATABASE = "postgres://postgres@127.0.0.1:9/volcano?connect_timeout=2"


@pytest.fixture
def configuration(tmp_path) -> Path:
    """The configuration in force, exported: the seeded one plus an audit-only namespace and two more cards."""
    GpuModel.objects.get_or_create(name="L4", defaults={"memory_mib": 23034, "match": "L4"})
    GpuModel.objects.get_or_create(name="V100-16GB", defaults={"memory_mib": 16384, "match": "V100-SXM2-16GB"})
    policy = NamespacePolicy.objects.create(namespace="rehearse-*", mode="audit-only", max_vgpus_per_pod=1)
    policy.allowed_presets.set(Preset.objects.filter(enabled=True)[:2])
    path = tmp_path / "configuration.yaml"
    assert "wrote configuration version" in run("export_configuration", "--output", str(path))
    return path


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def check(*args) -> tuple[int, str]:
    """check_pods in this process: its exit status and what it printed."""
    out = io.StringIO()
    try:
        call_command("check_pods", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def checked(*args) -> dict:
    status, text = check(*args, "--output", "json")
    assert status in (0, 1), text
    return json.loads(text[: text.rindex("}") + 1])


def write_yaml(path: Path, *objects: dict) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


ADMITTED: dict[tuple[str, str], dict] = {}


@pytest.fixture(autouse=True)
def leaders_read_from_mutates_answers(settings, monkeypatch):
    """/mutate with the serving-group leader lookup on (deploy/components/serving-groups), the API's answer for a
    leader Pod being the Pod /mutate admitted earlier in the test: what check_pods does with the files' leaders."""
    from mutations.webhook import groups

    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    groups.group_leader_memo_clear()
    ADMITTED.clear()
    monkeypatch.setattr(groups, "leader_pod_read", lambda *, namespace, name: ADMITTED.get((namespace, name)))
    yield
    groups.group_leader_memo_clear()


def mutate_answer(post_review, pod: dict) -> dict:
    response = post_review(pods.review(pod)).json()["response"]
    name = pod["metadata"].get("name")
    if name and response["allowed"]:
        admitted = apply_patch_v4(pod, decode_patch(response)) if "patch" in response else pod
        ADMITTED[(pod["metadata"]["namespace"], name)] = admitted
    return response


def leaders_first(items: list) -> list:
    """(verdict, Pod) pairs with the Pods that need no leader first, as a group's leader is created first."""
    return sorted(items, key=lambda item: group_leader_wanted(item[1]) is not None)


def assert_same_answer(item: dict, response: dict) -> None:
    """check_pods's verdict of a Pod is /mutate's answer to it: admitted or not, why, the warnings, the patch."""
    where = f"{item['file']}:{item['line']} {item['source']}"
    assert item["allowed"] == response["allowed"], where
    # check_pods prints every warning whole; the API server gets them cut to what kubectl shows.
    cut = [w[:admission.MAX_WARNING_CHARS] for w in item["warnings"][:admission.MAX_WARNINGS]]
    assert cut == response.get("warnings", []), where
    if response["allowed"]:
        sent = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        assert item["patch"] == sent, where
    else:
        assert item["reason"] == response["status"]["message"], where


# --- export_configuration ---------------------------------------------------------------------------

def test_export_configuration_writes_the_catalog_mutate_decides_with(configuration):
    document = yaml.safe_load(configuration.read_text())
    assert document["kind"] == "Configuration" and document["schemaVersion"] == 1
    assert {"presets", "gpuModels", "namespacePolicies", "languageModels"} <= set(document)
    live = catalog_build()
    read = catalog_from_document(document)
    assert read == live
    assert list(read.presets) == list(live.presets)  # the order presets are tried in
    assert read.language_models.keys() == live.language_models.keys()


def test_a_configuration_of_another_schema_version_is_refused_with_what_to_do(configuration):
    document = yaml.safe_load(configuration.read_text())
    document["schemaVersion"] = 99
    with pytest.raises(ConfigurationError, match="export the configuration again"):
        catalog_from_document(document)


def test_a_configuration_field_with_a_typo_is_refused_by_name(configuration):
    document = catalog_document(catalog_build())
    document["presets"][0]["vgpu_memory_mb"] = 1
    with pytest.raises(ConfigurationError, match=r"presets\[0\]: unknown field\(s\) vgpu_memory_mb"):
        catalog_from_document(document)


# --- check_pods: equal to /mutate -------------------------------------------------------------------

def test_check_pods_decides_every_corpus_manifest_as_mutate_does(configuration, post_review):
    files = sorted(MANIFESTS.glob("*.yaml"))
    found = checked(*map(str, files), "--configuration", str(configuration))
    assert len(found["pods"]) == len(files)
    pairs = [(item, default_pod(yaml.safe_load(Path(item["file"]).read_text()))) for item in found["pods"]]
    for item, pod in leaders_first(pairs):
        assert_same_answer(item, mutate_answer(post_review, pod))


def test_check_pods_decides_the_test_pods_as_mutate_does(configuration, post_review, tmp_path):
    corpus = [pods.vllm_deployment_pod(), pods.vllm_deployment_pod(gpus="2", model=None),
              pods.vllm_deployment_pod(namespace="rehearse-x", gpus="4"), pods.kserve_predictor_pod(),
              pods.ray_worker_pod(), pods.init_gpu_pod(), pods.half_cpu_pod(), pods.cpu_pod(),
              pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"})]
    found = checked(str(write_yaml(tmp_path / "pods.yaml", *corpus)), "--configuration", str(configuration))
    assert [item["line"] for item in found["pods"]] == sorted({item["line"] for item in found["pods"]})
    assert len(found["pods"]) == len(corpus)
    for item, pod in zip(found["pods"], corpus, strict=True):
        assert_same_answer(item, mutate_answer(post_review, pod))
    assert {"mutated", "denied", "audit-only"} <= {item["decision"] for item in found["pods"]}


# --- every workload kind ----------------------------------------------------------------------------

def _template(model: str = "Qwen/Qwen2.5-7B-Instruct") -> dict:
    return {"metadata": {"labels": {"app": "qwen"}},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                     "args": ["--model", model], "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _workloads() -> list[dict]:
    apps = [{"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": kind.lower()},
             "spec": {"selector": {"matchLabels": {"app": "qwen"}}, "template": _template()}}
            for kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"}, "spec": {"template": _template()}}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cron"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": _template()}}}}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "vllm"},
           "spec": {"leaderWorkerTemplate": {"size": 2, "leaderTemplate": _template(), "workerTemplate": _template()}}}
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
               "metadata": {"name": "kserve-huggingfaceserver"},
               "spec": {"supportedModelFormats": [{"name": "huggingface", "autoSelect": True}],
                        "containers": [{"name": "kserve-container", "image": "kserve/huggingfaceserver:v0.15.0",
                                        "args": ["--model_name={{.Name}}"]}]}}
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "llama3"},
            "spec": {"predictor": {"minReplicas": 1, "model": {
                "modelFormat": {"name": "huggingface"},
                "args": ["--model_id=meta-llama/meta-llama-3-8b-instruct"],
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "6", "memory": "24Gi"}}}}}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-workload"}, "data": {}}
    return [*apps, job, cron, lws, runtime, isvc, config_map]


def test_check_pods_decides_the_pod_of_every_workload_kind_as_mutate_does(configuration, post_review, tmp_path):
    objects = _workloads()
    found = checked(str(write_yaml(tmp_path / "workloads.yaml", *objects)), "--configuration", str(configuration),
                    "--namespace", "team-a")
    assert [item["source"] for item in found["pods"]] == [
        "Deployment/deployment", "StatefulSet/statefulset", "DaemonSet/daemonset", "ReplicaSet/replicaset",
        "Job/job", "CronJob/cron", "LeaderWorkerSet/vllm leader", "LeaderWorkerSet/vllm worker",
        "InferenceService/llama3 predictor"]
    rendered, _ = manifest_pods(objects, namespace="team-a")
    for item, pod in leaders_first(list(zip(found["pods"], [p.pod for p in rendered], strict=True))):
        assert item["namespace"] == "team-a" and item["decision"] == "mutated", item
        assert item["grants"] and item["grants"][0]["vgpu_memory_mib"] > 0
        assert_same_answer(item, mutate_answer(post_review, pod))
    assert found["summary"] == {"pods": 9, "admitted": 9, "denied": 0}


def _nim_files() -> list[dict]:
    """A NIM as NVIDIA publishes it for KServe: NVIDIA/nim-deploy kserve/runtimes/mistral-7b-instruct-v03-1.0.0.yaml
    and kserve/nim-models/mistral-7b-instruct-v03_1xgpu_1.0.0.yaml (@41682c5b, @b07302c7), secrets and volumes left
    out. The model is named only by the runtime's image."""
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
               "metadata": {"name": "nvidia-nim-mistral-7b-instruct-v03-1.0.0"},
               "spec": {"containers": [{"name": "kserve-container",
                                        "image": "nvcr.io/nim/mistralai/mistral-7b-instruct-v03:1.0.0",
                                        "env": [{"name": "NIM_CACHE_PATH", "value": "/mnt/models/cache"}],
                                        "resources": {"limits": {"cpu": "12", "memory": "32Gi"},
                                                      "requests": {"cpu": "12", "memory": "32Gi"}}}],
                        "supportedModelFormats": [{"name": "nvidia-nim-mistral-7b-instruct-v03", "autoSelect": True,
                                                   "priority": 1, "version": "1.0.0"}]}}
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "mistral-7b-instruct-v03-1xgpu"},
            "spec": {"predictor": {"minReplicas": 1, "model": {
                "modelFormat": {"name": "nvidia-nim-mistral-7b-instruct-v03"},
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                "runtime": "nvidia-nim-mistral-7b-instruct-v03-1.0.0", "storageUri": "pvc://nvidia-nim-pvc/"}}}}
    return [runtime, isvc]


def test_check_pods_sizes_a_nim_inference_service_for_the_model_its_image_names(configuration, post_review,
                                                                                tmp_path):
    files = _nim_files()
    found = checked(str(write_yaml(tmp_path / "nim.yaml", *files)), "--configuration", str(configuration),
                    "--namespace", "team-a")
    (item,) = found["pods"]
    assert item["source"] == "InferenceService/mistral-7b-instruct-v03-1xgpu predictor"
    assert item["decision"] == "mutated" and item["grants"][0]["vgpu_memory_mib"] > 16384
    assert any("NIM image's Mistral-7B-Instruct-v0.3" in w for w in item["warnings"]), item["warnings"]
    (rendered,), _ = manifest_pods(files, namespace="team-a")
    assert_same_answer(item, mutate_answer(post_review, rendered.pod))


def test_a_template_pod_is_completed_as_the_api_server_defaults_it():
    pods_found, _ = manifest_pods(_workloads(), namespace="team-b")
    deployment = pods_found[0].pod
    assert deployment["metadata"] == {"labels": {"app": "qwen"}, "generateName": "deployment-",
                                      "namespace": "team-b"}
    assert deployment["spec"]["schedulerName"] == "default-scheduler"
    assert deployment["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert pods_found[1].pod["metadata"]["name"] == "statefulset-0"


def test_leaderworkerset_pods_carry_what_lws_adds():
    pods_found, _ = manifest_pods(_workloads(), namespace="team-a")
    leader, worker = (p.pod for p in pods_found if p.source.startswith("LeaderWorkerSet/"))
    assert worker["metadata"]["name"] == "vllm-0-1"
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "2"
    assert worker["spec"]["containers"][0]["env"][:3] == [
        {"name": "LWS_LEADER_ADDRESS", "value": "vllm-0.vllm.team-a"}, {"name": "LWS_GROUP_SIZE", "value": "2"},
        {"name": "LWS_WORKER_INDEX", "value": "1"}]
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_an_inference_service_without_its_runtime_is_reported_not_checked(configuration, tmp_path):
    isvc = _workloads()[-2]
    status, text = check(str(write_yaml(tmp_path / "isvc.yaml", isvc)), "--configuration", str(configuration))
    assert status == 0
    assert "InferenceService/llama3: not checked: its predictor's ServingRuntime (huggingface)" in text


# --- denials, broken files, no database ------------------------------------------------------------

def test_a_denied_pod_exits_1_and_prints_the_denial_and_its_fix(configuration, tmp_path):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"})
    admitted = pods.cpu_pod()
    path = write_yaml(tmp_path / "denied.yaml", admitted, pod)
    status, text = check(str(path), "--configuration", str(configuration))
    assert status == 1
    assert f"{path}:" in text and "DENIED: " in text and "no-such-preset" in text
    assert "  fix: " in text
    assert "2 Pods checked" in text and "1 admitted, 1 denied" in text


def test_broken_yaml_exits_2_naming_the_file_and_line(configuration, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n spec: [\n")
    status, text = check(str(path), "--configuration", str(configuration))
    assert status == 2
    assert f"{path}:5: not valid YAML" in text


def test_a_missing_file_exits_2_naming_it(configuration, tmp_path):
    status, text = check(str(tmp_path / "absent.yaml"), "--configuration", str(configuration))
    assert status == 2 and f"{tmp_path / 'absent.yaml'}: cannot read the file" in text


def _manage(*args: str, database_url: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "INJECTOR_DEV_MODE": "true", "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_check_pods_needs_no_database(configuration, tmp_path):
    admitted = write_yaml(tmp_path / "ok.yaml", pods.vllm_deployment_pod())
    done = _manage("check_pods", str(admitted), "--configuration", str(configuration), "--output", "json",
                   database_url=CLOSED_PORT_DATABASE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pods"][0]["decision"] == "mutated"
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: {name: [\n")
    done = _manage("check_pods", str(broken), "--configuration", str(configuration), database_url=CLOSED_PORT_DATABASE)
    assert done.returncode == 2
    assert f"{broken}:3: not valid YAML" in done.stderr and "Traceback" not in done.stderr


def test_the_readmes_github_actions_step_is_a_valid_step_running_check_pods():
    readme = (REPO / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```yaml\n")[1:]]
    (step_text,) = [b for b in blocks if "check_pods" in b]
    (step,) = yaml.safe_load(step_text)
    assert set(step) == {"name", "run"}
    assert "manage.py check_pods" in step["run"] and "--configuration" in step["run"]
    assert "--entrypoint python" in step["run"]  # the image's entry point is the server


@pytest.fixture
def synced_inventory(tmp_path, monkeypatch):
    """The GPU inventory synced from the recorded cluster of tests/profiles/test_sync_gpu_inventory.py."""
    from tests.support.kube_api import KubeApiReplay, fixture

    replay = KubeApiReplay().start()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    replay.on("GET", "/api/v1/nodes", "nodes-gpu-page-1")
    replay.on("GET", "/api/v1/nodes", "nodes-gpu-page-2",
              query={"continue": fixture("nodes-gpu-page-1")["metadata"]["continue"]})
    replay.on("GET", "/api/v1/namespaces/kube-system/configmaps/volcano-vgpu-node-config",
              "configmap-volcano-vgpu-node-config")
    run("sync_gpu_inventory")
    yield
    replay.stop()


def test_the_gpu_inventory_is_exported_and_decides_offline_as_it_does_in_mutate(synced_inventory, post_review,
                                                                                  tmp_path):
    path = tmp_path / "configuration.yaml"
    run("export_configuration", "--output", str(path))
    document = yaml.safe_load(path.read_text())
    live = catalog_build()
    assert live.node_pools and document["inventoryVersion"] == live.inventory_version
    assert catalog_from_document(document) == live
    corpus = [pods.vllm_deployment_pod(gpus=gpus) for gpus in ("1", "2", "8")] + [
        pods.vllm_deployment_pod(annotations={"nvidia.com/use-gputype": "L4"}, model="Qwen/Qwen2.5-14B-Instruct")]
    found = checked(str(write_yaml(tmp_path / "pods.yaml", *corpus)), "--configuration", str(path))
    for item, pod in zip(found["pods"], corpus, strict=True):
        assert_same_answer(item, mutate_answer(post_review, pod))


def test_a_group_worker_takes_its_leaders_grant_from_the_files(configuration, tmp_path):
    files = [str(MANIFESTS / f"gke-lws-vllm-405b-{role}.yaml") for role in ("worker", "leader")]
    worker, leader = checked(*files, "--configuration", str(configuration))["pods"]
    assert worker["allowed"] and leader["allowed"], (worker["reason"], leader["reason"])
    assert {g["vgpu_memory_mib"] for g in worker["grants"]} == {g["vgpu_memory_mib"] for g in leader["grants"]}
    alone = checked(files[0], "--configuration", str(configuration))["pods"][0]
    assert any("the leader Pod is not among the files checked" in w for w in alone["warnings"]), alone["warnings"]
