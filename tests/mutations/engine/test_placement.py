"""Shape checks against the cluster's GPU node pools: Volcano's vGPU predicate on an empty node of each pool the
Pod can land on (nodeSelector, required node affinity, tolerations, gpu-type). Tables of Pod in, answer out."""

import pytest

from mutations.engine import mutate_pod
from mutations.engine.specs import (
    Catalog,
    Decision,
    GpuModelSpec,
    Mode,
    MutationContext,
    NodePoolSpec,
    PolicySpec,
    PresetSpec,
)

GKE_L4 = ("cloud.google.com/gke-accelerator", "nvidia-l4")
L4_POOL = NodePoolSpec("l4", "NVIDIA-L4", 4, 23034, 23034, nodes=3, labels=(GKE_L4, ("nvidia.com/gpu.count", "4")),
                       varying_labels=(("kubernetes.io/hostname", frozenset({"l4-0", "l4-1", "l4-2"})),),
                       gpu_model="L4")
A100_POOL = NodePoolSpec("a100", "NVIDIA-A100-SXM4-80GB", 8, 81920, 81920, nodes=2,
                         labels=(("nvidia.com/gpu.count", "8"), ("pool", "a100")),
                         taints=(("nvidia.com/gpu", "present", "NoSchedule"),), gpu_model="A100-80GB")
SCALED_POOL = NodePoolSpec("scaled", "NVIDIA-L4", 2, 46068, 23034, nodes=1, memory_scaling=2.0,
                           labels=(("nvidia.com/gpu.count", "2"), ("pool", "scaled")), gpu_model="L4")
POOLS = (L4_POOL, A100_POOL, SCALED_POOL)
A100 = GpuModelSpec("A100-80GB", 81920, "A100-SXM4-80GB")
L4 = GpuModelSpec("L4", 23034, "NVIDIA-L4")
H100 = GpuModelSpec("H100-80GB", 81559, "H100")
PRESETS = {"default": PresetSpec("default", 16384, is_default=True)}
GPU_MODELS = {"A100-80GB": A100, "L4": L4}
INVENTORY = Catalog(presets=PRESETS, gpu_models=GPU_MODELS, default_preset="default", node_pools=POOLS)
NO_INVENTORY = Catalog(presets=PRESETS, gpu_models=GPU_MODELS, default_preset="default")
POLICY = PolicySpec(namespace="*", default_preset="default")
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def pod(*, gpus=None, number=None, memory=None, cores=None, annotations=None, selector=None, affinity=None,
        tolerations=None, containers=1, command=None):
    """A Pod asking for nvidia.com/gpu (gpus), or already written in Volcano's resources (number, memory)."""
    limits = {"cpu": "1", "memory": "8Gi"}
    if gpus is not None:
        limits["nvidia.com/gpu"] = str(gpus)
    if number is not None:
        limits["volcano.sh/vgpu-number"] = str(number)
    if memory is not None:
        limits["volcano.sh/vgpu-memory"] = str(memory)
    if cores is not None:
        limits["volcano.sh/vgpu-cores"] = str(cores)
    bodies = [{"name": f"main-{i}", "image": "registry.example/app:1", "resources": {"limits": dict(limits),
                                                                                       "requests": dict(limits)}}
              for i in range(containers)]
    if command:
        bodies[0]["args"] = command
    spec = {"containers": bodies, "schedulerName": "volcano"}
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    if tolerations:
        spec["tolerations"] = tolerations
    metadata = {"name": "p", "namespace": "team-a"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def run(body, catalog=INVENTORY, policy=POLICY):
    return mutate_pod(body, MutationContext(namespace="team-a", policy=policy, catalog=catalog))


def violation(result):
    assert result.decision is Decision.DENIED, result.reason
    return result.explanation["violations"][0]


# --- each shape rule -----------------------------------------------------------------------------------
def test_slice_larger_than_every_card_of_the_selected_pool_is_denied_naming_what_the_cluster_has():
    result = run(pod(number=1, memory=27180, selector=dict([GKE_L4])))
    found = violation(result)
    assert found["rule"] == "cluster.shape"
    assert found["field"] == "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]"
    assert found["message"].startswith("nodes matching cloud.google.com/gke-accelerator=nvidia-l4 have 4 L4 cards of "
                                       "23,034 MiB in 3 nodes; this Pod needs 27,180 MiB a card: ask for at most "
                                       "23,034 MiB per vGPU, or choose another pool")


def test_more_vgpus_than_cards_per_node_is_denied():
    found = violation(run(pod(number=8, memory=8192, selector=dict([GKE_L4]))))
    assert found["field"] == "spec.containers[0].resources.limits[volcano.sh/vgpu-number]"
    assert "container 'main-0' asks for 8 vGPUs, each on its own card: ask for at most 4 GPUs" in found["message"]


@pytest.mark.parametrize(("annotations", "key"), [
    ({"nvidia.com/use-gputype": "A100"}, "nvidia.com/use-gputype"),
    ({"nvidia.com/use-gputype": "H100,A100"}, "nvidia.com/use-gputype"),
    ({"nvidia.com/nouse-gputype": "l4"}, "nvidia.com/nouse-gputype"),  # case-insensitive, like Volcano
])
def test_card_type_the_selected_pool_does_not_have_is_denied(annotations, key):
    found = violation(run(pod(number=1, memory=8192, annotations=annotations, selector=dict([GKE_L4]))))
    assert found["field"] == f"metadata.annotations[{key}]"
    assert "leaves none of their cards (NVIDIA-L4)" in found["message"]


def test_use_gputype_substring_that_the_pool_has_is_admitted():
    assert run(pod(number=1, memory=8192, annotations={"nvidia.com/use-gputype": "h100,L4"},
                   selector=dict([GKE_L4]))).allowed


def test_vgpu_mode_the_pool_does_not_run_is_denied():
    found = violation(run(pod(number=1, memory=8192, annotations={"volcano.sh/vgpu-mode": "mig"},
                              selector=dict([GKE_L4]))))
    assert found["field"] == "metadata.annotations[volcano.sh/vgpu-mode]"
    assert "set volcano.sh/vgpu-mode to hami-core or remove it" in found["message"]


def test_exclusive_cores_on_more_containers_than_cards_is_denied_and_fewer_fit():
    one_card = NodePoolSpec("t4", "NVIDIA-Tesla-T4", 1, 15360, 15360, labels=(("pool", "t4"),))
    catalog = Catalog(presets=PRESETS, gpu_models=GPU_MODELS, default_preset="default", node_pools=(one_card,))
    found = violation(run(pod(number=1, memory=4096, cores=100, containers=2, selector={"pool": "t4"}), catalog))
    assert found["field"] == "spec.containers[1].resources.limits[volcano.sh/vgpu-cores]"
    assert run(pod(number=1, memory=4096, cores=50, containers=2, selector={"pool": "t4"}), catalog).allowed


def test_more_slices_than_a_card_holds_is_denied():
    one_card = NodePoolSpec("t4", "NVIDIA-Tesla-T4", 1, 15360, 15360, split_count=2, labels=(("pool", "t4"),))
    catalog = Catalog(presets=PRESETS, gpu_models=GPU_MODELS, default_preset="default", node_pools=(one_card,))
    found = violation(run(pod(number=1, memory=1024, containers=3, selector={"pool": "t4"}), catalog))
    assert "more slices than the cards hold (2 a card)" in found["message"]


def test_capacity_is_never_checked_a_pool_of_busy_nodes_still_admits():
    # the pool is judged on an empty node: how much is free now does not enter
    assert run(pod(number=4, memory=23034, selector=dict([GKE_L4]))).allowed


# --- each way a Pod selects a pool --------------------------------------------------------------------
BIG = {"number": 1, "memory": 60000}  # fits only the A100 pool, which is tainted


@pytest.mark.parametrize(("how", "extra", "allowed"), [
    ("nothing: the untainted pools only", {}, False),
    ("a toleration of the taint (Exists)", {"tolerations": TOLERATE_GPU}, True),
    ("a toleration of the taint (Equal, its value)",
     {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]}, True),
    ("a toleration of another value", {"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]}, False),
    ("a toleration of every taint", {"tolerations": [{"operator": "Exists"}]}, True),
    ("a toleration of another effect",
     {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]}, False),
    ("nodeSelector of the A100 pool", {"selector": {"pool": "a100"}, "tolerations": TOLERATE_GPU}, True),
    ("nodeSelector of the L4 pool", {"selector": dict([GKE_L4]), "tolerations": TOLERATE_GPU}, False),
    ("affinity In", {"affinity": [{"key": "pool", "operator": "In", "values": ["a100", "x"]}],
                     "tolerations": TOLERATE_GPU}, True),
    ("affinity NotIn", {"affinity": [{"key": "pool", "operator": "NotIn", "values": ["a100"]}],
                        "tolerations": TOLERATE_GPU}, False),
    ("affinity Exists", {"affinity": [{"key": "pool", "operator": "Exists"}], "tolerations": TOLERATE_GPU}, True),
    ("affinity DoesNotExist", {"affinity": [{"key": "pool", "operator": "DoesNotExist"}],
                               "tolerations": TOLERATE_GPU}, False),
    ("affinity Gt", {"affinity": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}],
                     "tolerations": TOLERATE_GPU}, True),
    ("affinity Lt", {"affinity": [{"key": "nvidia.com/gpu.count", "operator": "Lt", "values": ["8"]}],
                     "tolerations": TOLERATE_GPU}, False),
    ("a label that differs per node (hostname)",
     {"affinity": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["l4-1"]}]}, False),
])
def test_pools_a_pod_can_land_on(how, extra, allowed):
    result = run(pod(**BIG, **extra))
    assert result.allowed is allowed, (how, result.reason)


def test_denial_without_a_selection_names_every_pool_it_could_land_on():
    message = violation(run(pod(**BIG)))["message"]
    assert message.startswith("the GPU nodes have 2 L4 cards of 46,068 MiB in 1 node; 4 L4 cards of 23,034 MiB in "
                              "3 nodes; this Pod needs 60,000 MiB a card")


def test_gpu_type_annotation_pins_a_card_no_reachable_pool_has():
    found = violation(run(pod(gpus=1, annotations={"volcano-injector.io/gpu-type": "A100-80GB"})))
    assert found["rule"] == "cluster.shape" and found["field"] == "metadata.annotations[volcano-injector.io/gpu-type]"
    assert ("volcano-injector.io/gpu-type 'A100-80GB' pins nvidia.com/use-gputype 'A100-SXM4-80GB', which none of "
            "their cards is: name a GPU model they have (L4) instead") in found["message"]
    assert run(pod(gpus=1, annotations={"volcano-injector.io/gpu-type": "A100-80GB"}, tolerations=TOLERATE_GPU)).allowed


def test_a_preset_pinned_to_a_card_no_reachable_pool_has_names_the_preset():
    a100_preset = PresetSpec("a100-full", 81920, gpu_model=A100)
    catalog = Catalog(presets={**PRESETS, "a100-full": a100_preset}, gpu_models=GPU_MODELS, default_preset="default",
                      node_pools=POOLS)
    found = violation(run(pod(gpus=1, annotations={"volcano-injector.io/preset": "a100-full"}), catalog))
    assert found["field"] == "metadata.annotations[volcano-injector.io/preset]"
    assert "preset 'a100-full' (GPU model 'A100-80GB') pins nvidia.com/use-gputype" in found["message"]


def test_a_selection_no_pool_matches_is_admitted_with_a_warning():
    result = run(pod(**BIG, selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}))
    assert result.allowed
    assert any("no GPU node pool in the inventory matches" in w for w in result.warnings)


def test_a_pod_bound_to_a_node_by_name_is_not_checked():
    body = pod(**BIG)
    body["spec"]["nodeName"] = "l4-0"
    assert run(body).allowed


# --- sized for the one pool the Pod can land on --------------------------------------------------------
def test_a_fraction_is_of_the_one_pools_card():
    result = run(pod(gpus="500m", selector=dict([GKE_L4])))
    assert result.allowed
    assert result.grants[0].vgpu_memory_mib == 11517  # half of 23,034 MiB, not of the largest card known
    assert "nvidia.com/use-gputype" not in result.pod["metadata"].get("annotations", {})


def test_an_estimate_is_capped_at_the_one_pools_card_not_the_largest_known():
    body = pod(gpus=1, annotations={"volcano-injector.io/model-size": "13b"}, selector=dict([GKE_L4]))
    found = violation(run(body))
    assert found["rule"] == "gpu.card_memory" and "more than one L4 has (23034 MiB)" in found["message"]
    assert run(pod(gpus=1, annotations={"volcano-injector.io/model-size": "13b"}), NO_INVENTORY).allowed


# --- oversubscribed pools ----------------------------------------------------------------------------
SCALED = {"selector": {"pool": "scaled"}}
VLLM = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]


def test_slice_above_the_physical_memory_of_an_oversubscribed_pool_is_admitted_with_a_warning():
    result = run(pod(number=1, memory=30000, **SCALED))
    assert result.allowed
    assert ("30,000 MiB a vGPU is more than an L4 has (23,034 MiB): the rest lives in host memory (oversubscribed "
            "pool)") in result.warnings


def test_a_preallocating_server_on_an_oversubscribed_slice_is_denied():
    found = violation(run(pod(number=1, memory=30000, command=VLLM, **SCALED)))
    assert found["rule"] == "cluster.oversubscribed" and found["policy"] == "*"
    assert ("runs vLLM, which takes its whole slice at start: 30,000 MiB a card is more than an L4 has"
            in found["message"])


def test_a_policy_may_allow_a_preallocating_server_on_an_oversubscribed_slice():
    policy = PolicySpec(namespace="*", default_preset="default", allow_oversubscribed_serving=True)
    result = run(pod(number=1, memory=30000, command=VLLM, **SCALED), policy=policy)
    assert result.allowed and any("host memory" in w for w in result.warnings)


def test_a_slice_within_the_physical_memory_says_nothing():
    result = run(pod(number=1, memory=20000, command=VLLM, **SCALED))
    assert result.allowed and not any("host memory" in w for w in result.warnings)


# --- without an inventory, and audit-only ------------------------------------------------------------
def test_without_an_inventory_the_declared_gpu_models_decide_as_before():
    assert run(pod(number=1, memory=60000, selector=dict([GKE_L4])), NO_INVENTORY).allowed
    found = violation(run(pod(gpus="500m", selector=dict([GKE_L4])), NO_INVENTORY))
    assert found["rule"] == "gpu.fraction"


def test_audit_only_records_the_would_deny_and_admits():
    policy = PolicySpec(namespace="*", default_preset="default", mode=Mode.AUDIT_ONLY)
    result = run(pod(number=1, memory=27180, selector=dict([GKE_L4])), policy=policy)
    assert result.decision is Decision.AUDIT_ONLY and result.allowed
    assert result.reason.startswith("would deny: ")
    assert result.explanation["violations"][0]["rule"] == "cluster.shape"


# --- declared pools that scale from zero -------------------------------------------------------------
def test_a_declared_pool_without_labels_holds_pods_that_select_no_nodes():
    declared = NodePoolSpec("H100-80GB", "NVIDIA-H100-80GB-HBM3", 0, 81559, declared=True, gpu_model="H100-80GB")
    catalog = Catalog(presets=PRESETS, gpu_models={**GPU_MODELS, "H100-80GB": H100}, default_preset="default",
                      node_pools=(*POOLS, declared))
    assert run(pod(**BIG), catalog).allowed
    assert not run(pod(**BIG, selector=dict([GKE_L4])), catalog).allowed


def test_a_declared_pool_with_labels_holds_pods_that_select_them():
    declared = NodePoolSpec("H100-80GB", "NVIDIA-H100-80GB-HBM3", 0, 81559, declared=True, gpu_model="H100-80GB",
                            labels=(("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),))
    catalog = Catalog(presets=PRESETS, gpu_models={**GPU_MODELS, "H100-80GB": H100}, default_preset="default",
                      node_pools=(*POOLS, declared))
    assert run(pod(**BIG, selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}), catalog).allowed
    assert not run(pod(number=1, memory=90000, selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}),
                   catalog).allowed


@pytest.mark.parametrize("spec", [
    {"affinity": ["not", "an", "object"]},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": "pool In a100"}]}}}},
    {"nodeSelector": ["pool=a100"]},
    {"tolerations": {"key": "nvidia.com/gpu"}},
])
def test_a_selection_of_a_shape_the_api_server_refuses_is_not_a_crash(spec):
    body = pod(number=1, memory=8192)
    body["spec"].update(spec)
    assert run(body).decision in (Decision.UNCHANGED, Decision.MUTATED, Decision.DENIED)
