"""Load sensible defaults: common GPU models, a default preset, presets for LLMs from 1.5B to 70B,
and the catch-all `*` namespace policy.

Preset memory follows the estimate in README ("Sizing GPU memory for a model"): fp16 weights
(2 bytes a parameter) x 1.2 + 2 GiB, divided by vLLM's gpu-memory-utilization 0.9, rounded up
to whole GiB, for the largest model in the preset's range. Models too large for one 80 GB card
are split across the number of vGPUs the description names (tensor parallelism), per vGPU.
"""

import math

from django.db import migrations


def estimate_mib(size_b: float, gpus: int = 1) -> int:
    weights_mib = size_b * 1e9 * 2 / 2**20
    need_mib = (weights_mib * 1.2 + 2048) / 0.9 / gpus
    return int(math.ceil(need_mib / 1024) * 1024)


GPU_MODELS = [
    # name, memory MiB, substring Volcano matches in the card name
    ("T4", 15360, "T4"),
    ("A10", 23028, "A10"),
    ("L40S", 46068, "L40S"),
    ("A100-40GB", 40960, "A100-SXM4-40GB"),
    ("A100-80GB", 81920, "A100-SXM4-80GB"),
    ("H100-80GB", 81559, "H100"),
]

PRESETS = [
    # name, min B (exclusive), max B (inclusive), GPUs the model is split over, cores %, description
    ("llm-1.5b", 0, 3, 1, 25, "Models up to 3B parameters (Qwen2.5-1.5B, Llama-3.2-3B) in fp16."),
    ("llm-7b", 3, 8, 1, 50, "Models from 3B to 8B parameters (Llama-3.1-8B, Qwen2.5-7B, Mistral-7B) in fp16."),
    ("llm-14b", 8, 14, 1, None, "Models from 8B to 14B parameters (Qwen2.5-14B, Phi-4) in fp16."),
    ("llm-32b", 14, 34, 2, None, "Models from 14B to 34B parameters in fp16, per vGPU: ask for 2 GPUs."),
    ("llm-70b", 34, 72, 4, None, "Models from 34B to 72B parameters in fp16, per vGPU: ask for 4 GPUs."),
]


def load(apps, schema_editor):
    # The database migrate runs on (apply_migrations uses `direct` behind a pooler): rows written through
    # `default` would be committed apart from this migration's transaction.
    db = schema_editor.connection.alias
    GpuModel = apps.get_model("profiles", "GpuModel")
    Preset = apps.get_model("profiles", "Preset")
    NamespacePolicy = apps.get_model("profiles", "NamespacePolicy")
    ConfigVersion = apps.get_model("profiles", "ConfigVersion")
    for name, memory_mib, match in GPU_MODELS:
        GpuModel.objects.using(db).get_or_create(name=name, defaults={"memory_mib": memory_mib, "match": match})
    default, _ = Preset.objects.using(db).get_or_create(
        name="default",
        defaults={
            "description": "Used when no annotation or namespace policy chooses: 16 GiB, enough for a 4B model in fp16.",
            "vgpu_memory_mib": 16384,
            "is_default": True,
        },
    )
    for name, low, high, gpus, cores, description in PRESETS:
        Preset.objects.using(db).get_or_create(
            name=name,
            defaults={
                "description": description,
                "vgpu_memory_mib": estimate_mib(high, gpus),
                "vgpu_cores_percent": cores,
                "min_model_size_b": low,
                "max_model_size_b": high,
            },
        )
    NamespacePolicy.objects.using(db).get_or_create(
        namespace="*",
        defaults={
            "description": "Every namespace without a more specific policy.",
            "mode": "enforce",
            "default_preset": default,
            "scheduler_name": "volcano",
            "scheduler_scope": "gpu-pods",
            "cpu_request": "1",
            "cpu_limit": "8",
            "memory_request": "8Gi",
            "memory_limit": "32Gi",
            "deny_privileged": True,
        },
    )
    ConfigVersion.objects.using(db).get_or_create(pk=1, defaults={"version": 1})


def unload(apps, schema_editor):
    db = schema_editor.connection.alias
    apps.get_model("profiles", "NamespacePolicy").objects.using(db).filter(namespace="*").delete()
    names = ["default"] + [p[0] for p in PRESETS]
    apps.get_model("profiles", "Preset").objects.using(db).filter(name__in=names).delete()
    apps.get_model("profiles", "GpuModel").objects.using(db).filter(name__in=[g[0] for g in GPU_MODELS]).delete()


class Migration(migrations.Migration):
    dependencies = [("profiles", "0001_initial")]
    operations = [migrations.RunPython(load, unload)]
