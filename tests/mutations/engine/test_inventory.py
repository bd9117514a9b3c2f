"""Reading GPU nodes as Volcano's scheduler does (the register annotation, the plugin's ConfigMap, labels), and
grouping them into pools: tables of node JSON in, readings out."""

import json

import pytest

from mutations.engine.inventory import (
    NodeConfig,
    node_config_parse,
    node_read,
    pools_group,
    register_annotation_parse,
)

L4 = "GPU-0a1b,10,23034,NVIDIA-L4,true,hami-core:"


def node(name, annotation=None, labels=None, taints=None, allocatable=None):
    metadata = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
    if annotation is not None:
        metadata["annotations"] = {"volcano.sh/node-vgpu-register": annotation}
    return {"metadata": metadata, "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": "8", **(allocatable or {"volcano.sh/vgpu-number": "40"})}}}


@pytest.mark.parametrize(("annotation", "cards", "problem"), [
    # the device plugin's own shape: UUID,count,devmem,type,health,mode, each record followed by ':'
    ("GPU-1,10,23034,NVIDIA-L4,true,hami-core:GPU-2,10,23034,NVIDIA-L4,true,hami-core:",
     [("GPU-1", 10, 23034, "NVIDIA-L4", True, "hami-core"), ("GPU-2", 10, 23034, "NVIDIA-L4", True, "hami-core")],
     None),
    ("GPU-1,4,81920,NVIDIA-A100-SXM4-80GB,false,mig:", [("GPU-1", 4, 81920, "NVIDIA-A100-SXM4-80GB", False, "mig")],
     None),
    # an older plugin: five fields, no mode
    ("GPU-1,10,23034,NVIDIA-L4,true:", [("GPU-1", 10, 23034, "NVIDIA-L4", True, "hami-core")],
     "record(s) of five fields"),
    # HAMi's seven fields: UUID,count,devmem,devcore,type,numa,health
    ("GPU-1,10,46068,100,NVIDIA-L40S,0,true:", [("GPU-1", 10, 46068, "NVIDIA-L40S", True, "hami-core")], None),
    # HAMi's JSON list
    (json.dumps([{"id": "GPU-1", "count": 10, "devmem": 46068, "devcore": 100, "type": "NVIDIA-L40S", "numa": 0,
                  "mode": "hami-core", "health": True}]),
     [("GPU-1", 10, 46068, "NVIDIA-L40S", True, "hami-core")], "JSON list"),
    # one record without ':' is not decoded by Volcano at all
    ("GPU-1,10,23034,NVIDIA-L4,true,hami-core", [("GPU-1", 10, 23034, "NVIDIA-L4", True, "hami-core")],
     "without a trailing ':'"),
])
def test_register_annotation_shapes_are_read(annotation, cards, problem):
    found, problems = register_annotation_parse(annotation)
    assert [(c.uuid, c.split_count, c.registered_memory_mib, c.card_type, c.healthy, c.mode) for c in found] == cards
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(("annotation", "problem"), [
    ("GPU-1,ten,23034,NVIDIA-L4,true,hami-core:",
     "record 1 'GPU-1,ten,23034,NVIDIA-L4,true,hami-core': count 'ten' is not a positive whole number"),
    ("GPU-1,10,24Gi,NVIDIA-L4,true,hami-core:", "devmem '24Gi' is not a positive whole number of MiB"),
    ("GPU-1,10:", "2 fields, expected UUID,count,devmem,type,health,mode"),
    ("[{not json", "looks like JSON but is not"),
    ("   ", "empty"),
])
def test_malformed_annotation_is_reported_not_guessed(annotation, problem):
    found, problems = register_annotation_parse(annotation)
    assert found == []
    assert any(problem in p for p in problems), problems


def test_a_bad_record_among_good_ones_keeps_the_good_ones_and_names_the_bad():
    found, problems = register_annotation_parse(L4 + "garbage:" + L4)
    assert len(found) == 2 and problems == ["record 2 'garbage': 1 fields, expected UUID,count,devmem,type,health,mode"]


def test_node_config_gives_scaling_split_count_and_mode_by_node():
    configs, problems = node_config_parse(json.dumps({"nodeconfig": [
        {"name": "gpu-a", "operatingmode": "hami-core", "devicememoryscaling": 2, "devicesplitcount": 20,
         "devicecorescaling": 1, "migstrategy": "none"},
        {"operatingmode": "mig"},
    ]}))
    assert configs == {"gpu-a": NodeConfig(memory_scaling=2.0, split_count=20, operating_mode="hami-core",
                                           cores_scaling=1.0)}
    assert problems == ["nodeconfig[1] names no node"]


def test_node_config_that_is_not_json_is_reported():
    assert node_config_parse("nodeconfig: []")[0] == {}
    assert "not JSON" in node_config_parse("nodeconfig: []")[1][0]


def test_physical_memory_is_the_gfd_label_else_registered_over_the_scaling():
    scaled = node_read(node("a", "GPU-1,10,46068,NVIDIA-L4,true,hami-core:"), {"a": NodeConfig(memory_scaling=2.0)})
    assert scaled.registered_memory_mib == 46068 and scaled.physical_memory_mib == 23034
    labelled = node_read(node("b", L4, labels={"nvidia.com/gpu.memory": "23034"}), {})
    assert labelled.physical_memory_mib == 23034


@pytest.mark.parametrize(("memory", "mib"), [
    ("192687492Ki", 188_171),  # what a GKE node reports: KiB, cut to whole MiB
    ("64Gi", 65_536),
    ("68719476736", 65_536),  # bytes
    ("a lot", None),  # unreadable: unknown, never guessed
    (None, None),
])
def test_a_gpu_nodes_allocatable_host_memory_is_read_in_mib(memory, mib):
    allocatable = {"volcano.sh/vgpu-number": "40", **({"memory": memory} if memory is not None else {})}
    assert node_read(node("a", L4, allocatable=allocatable), {}).memory_allocatable_mib == mib


def test_allocatable_memory_alone_is_no_sign_of_a_gpu():
    assert node_read({"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8", "memory": "64Gi"}}},
                     {}) is None


def test_nodes_without_gpus_are_skipped_and_gpu_nodes_without_the_plugin_are_kept_with_a_problem():
    assert node_read({"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8"}}}, {}) is None
    bare = node_read(node("gfd-only", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, allocatable={}), {})
    assert bare.registered is False and bare.card_type == "NVIDIA-H100-80GB-HBM3"
    assert "has not registered its cards" in bare.problems[0]


def test_taints_that_keep_pods_off_are_kept_and_prefer_no_schedule_is_not():
    reading = node_read(node("a", L4, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                            {"key": "soft", "effect": "PreferNoSchedule"}]), {})
    assert reading.taints == (("nvidia.com/gpu", "present", "NoSchedule"),)


def test_nodes_alike_form_one_pool_and_hostnames_do_not_split_it():
    accel = {"cloud.google.com/gke-accelerator": "nvidia-l4", "nvidia.com/gfd.timestamp": "1"}
    nodes = [node(f"l4-{i}", L4 * 4, labels={**accel, "nvidia.com/gfd.timestamp": str(i)}) for i in range(3)]
    nodes.append(node("a100-0", "GPU-9,10,81920,NVIDIA-A100-SXM4-80GB,true,hami-core:" * 8))
    nodes.append(node("l4-tainted", L4 * 4, labels=accel,
                      taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}]))
    pools = pools_group([node_read(n, {}) for n in nodes], {"NVIDIA-L4": "L4"})
    by_nodes = sorted((spec.card_type, spec.cards_per_node, spec.nodes, names) for spec, names in pools.values())
    assert by_nodes == [("NVIDIA-A100-SXM4-80GB", 8, 1, ["a100-0"]),
                        ("NVIDIA-L4", 4, 1, ["l4-tainted"]),
                        ("NVIDIA-L4", 4, 3, ["l4-0", "l4-1", "l4-2"])]
    l4 = next(spec for spec, names in pools.values() if spec.nodes == 3)
    assert l4.label("cloud.google.com/gke-accelerator") == "nvidia-l4" and l4.gpu_model == "L4"
    assert dict(l4.varying_labels)["kubernetes.io/hostname"] == frozenset({"l4-0", "l4-1", "l4-2"})
    assert l4.name.startswith("NVIDIA-L4-x4-")


def test_pool_names_are_stable_from_run_to_run():
    first = pools_group([node_read(node("a", L4), {})])
    second = pools_group([node_read(node("b", L4), {})])
    assert list(first) == list(second)
