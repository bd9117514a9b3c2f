"""The configuration's schema and its first rows as migrations 0001-0007 left them, in one migration (issue 29).

A database that applied all of them has nothing to do here (`replaces`): Django records this migration as
applied. A database part of the way through them must first be migrated by the release that still has them
(deploy/README.md, "The squashed migrations"). tests/test_migrations_squashed.py compares the schema and
rows this makes with a snapshot of the old chain's.

The rows a new database starts with (GPU models, presets, the catch-all `*` policy, the language-model catalog,
configuration version 1, the change log's ids above it) are written out here, not read from the code: they are
what this migration has always given a new database, and nothing in the code reads them from here (it reads the
rows). A change to them for databases that exist is a data migration of its own. What the old chain did only to
the databases of its time is gone: hashing DRF's plaintext tokens into digests (0004) ran on every database that
reaches this release through it, and a new database has no plaintext token.
"""

import math

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def estimate_mib(size_b: float, gpus: int = 1) -> int:
    """A preset's vGPU memory (migration 0002, README "Sizing GPU memory for a model"): fp16 weights (2 bytes a
    parameter) x 1.2 + 2 GiB, divided by vLLM's gpu-memory-utilization 0.9, over `gpus` vGPUs (tensor
    parallelism), rounded up to whole GiB, for the largest model of the preset's range."""
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

DEFAULT_PRESET = {
    "name": "default",
    "description": "Used when no annotation or namespace policy chooses: 16 GiB, enough for a 4B model in fp16.",
    "vgpu_memory_mib": 16384,
    "is_default": True,
}

PRESETS = [
    # name, min B (exclusive), max B (inclusive), GPUs the model is split over, cores %, description
    ("llm-1.5b", 0, 3, 1, 25, "Models up to 3B parameters (Qwen2.5-1.5B, Llama-3.2-3B) in fp16."),
    ("llm-7b", 3, 8, 1, 50, "Models from 3B to 8B parameters (Llama-3.1-8B, Qwen2.5-7B, Mistral-7B) in fp16."),
    ("llm-14b", 8, 14, 1, None, "Models from 8B to 14B parameters (Qwen2.5-14B, Phi-4) in fp16."),
    ("llm-32b", 14, 34, 2, None, "Models from 14B to 34B parameters in fp16, per vGPU: ask for 2 GPUs."),
    ("llm-70b", 34, 72, 4, None, "Models from 34B to 72B parameters in fp16, per vGPU: ask for 4 GPUs."),
]

CATCH_ALL_POLICY = {
    "namespace": "*",
    "description": "Every namespace without a more specific policy.",
    "mode": "enforce",
    "scheduler_name": "volcano",
    "scheduler_scope": "gpu-pods",
    "cpu_request": "1",
    "cpu_limit": "8",
    "memory_request": "8Gi",
    "memory_limit": "32Gi",
    "deny_privileged": True,
}

# The language-model catalog (migration 0005). Every number is from the model's published config.json (the URL is stored with
# it): num_hidden_layers, num_key_value_heads, head_dim (or hidden_size / num_attention_heads),
# hidden_size, vocab_size, max_position_embeddings, tie_word_embeddings, sliding_window (with the
# layers that use it: Gemma 2 every other layer, Gemma 3 five of every six, gpt-oss every other);
# parameters from the model card (safetensors total). Which copy of each config.json was read to check these,
# and what could not be: docs/sizing.md, "The seeded catalog, checked". Phi-3's 4k configs declare a
# sliding_window of 2047 that vLLM does not apply (no layer_types): seeded without a window. Matching strips
# the organisation, -Instruct/-it and quantization suffixes (docs/sizing.md).
#  name, other identifiers, params B, active B, layers, KV heads, head dim, hidden, vocab, context, dtype,
#  tied, sliding window, window layers, Hugging Face repository of the config.json
LANGUAGE_MODELS = [
    ("Llama-3.1-8B-Instruct", ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct",
                               "Meta-Llama-3.1-8B-Instruct"],
     "8.030", None, 32, 8, 128, 4096, 128256, 131072, "bf16", False, None, 0, "meta-llama/Llama-3.1-8B-Instruct"),
    ("Llama-3.1-70B-Instruct", ["meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B-Instruct",
                                "Meta-Llama-3.1-70B-Instruct"],
     "70.554", None, 80, 8, 128, 8192, 128256, 131072, "bf16", False, None, 0, "meta-llama/Llama-3.1-70B-Instruct"),
    ("Llama-3.3-70B-Instruct", ["meta-llama/Llama-3.3-70B-Instruct"],
     "70.554", None, 80, 8, 128, 8192, 128256, 131072, "bf16", False, None, 0, "meta-llama/Llama-3.3-70B-Instruct"),
    ("Llama-3.2-1B-Instruct", ["meta-llama/Llama-3.2-1B-Instruct"],
     "1.236", None, 16, 8, 64, 2048, 128256, 131072, "bf16", True, None, 0, "meta-llama/Llama-3.2-1B-Instruct"),
    ("Llama-3.2-3B-Instruct", ["meta-llama/Llama-3.2-3B-Instruct"],
     "3.213", None, 28, 8, 128, 3072, 128256, 131072, "bf16", True, None, 0, "meta-llama/Llama-3.2-3B-Instruct"),
    ("Qwen2.5-0.5B-Instruct", ["Qwen/Qwen2.5-0.5B-Instruct"],
     "0.494", None, 24, 2, 64, 896, 151936, 32768, "bf16", True, None, 0, "Qwen/Qwen2.5-0.5B-Instruct"),
    ("Qwen2.5-1.5B-Instruct", ["Qwen/Qwen2.5-1.5B-Instruct"],
     "1.544", None, 28, 2, 128, 1536, 151936, 32768, "bf16", True, None, 0, "Qwen/Qwen2.5-1.5B-Instruct"),
    ("Qwen2.5-3B-Instruct", ["Qwen/Qwen2.5-3B-Instruct"],
     "3.086", None, 36, 2, 128, 2048, 151936, 32768, "bf16", True, None, 0, "Qwen/Qwen2.5-3B-Instruct"),
    ("Qwen2.5-7B-Instruct", ["Qwen/Qwen2.5-7B-Instruct"],
     "7.616", None, 28, 4, 128, 3584, 152064, 32768, "bf16", False, None, 0, "Qwen/Qwen2.5-7B-Instruct"),
    ("Qwen2.5-14B-Instruct", ["Qwen/Qwen2.5-14B-Instruct"],
     "14.770", None, 48, 8, 128, 5120, 152064, 32768, "bf16", False, None, 0, "Qwen/Qwen2.5-14B-Instruct"),
    ("Qwen2.5-32B-Instruct", ["Qwen/Qwen2.5-32B-Instruct"],
     "32.764", None, 64, 8, 128, 5120, 152064, 32768, "bf16", False, None, 0, "Qwen/Qwen2.5-32B-Instruct"),
    ("Qwen2.5-72B-Instruct", ["Qwen/Qwen2.5-72B-Instruct"],
     "72.706", None, 80, 8, 128, 8192, 152064, 32768, "bf16", False, None, 0, "Qwen/Qwen2.5-72B-Instruct"),
    ("Qwen3-4B", ["Qwen/Qwen3-4B"],
     "4.022", None, 36, 8, 128, 2560, 151936, 40960, "bf16", True, None, 0, "Qwen/Qwen3-4B"),
    ("Qwen3-8B", ["Qwen/Qwen3-8B"],
     "8.191", None, 36, 8, 128, 4096, 151936, 40960, "bf16", False, None, 0, "Qwen/Qwen3-8B"),
    ("Qwen3-14B", ["Qwen/Qwen3-14B"],
     "14.768", None, 40, 8, 128, 5120, 151936, 40960, "bf16", False, None, 0, "Qwen/Qwen3-14B"),
    ("Qwen3-32B", ["Qwen/Qwen3-32B"],
     "32.762", None, 64, 8, 128, 5120, 151936, 40960, "bf16", False, None, 0, "Qwen/Qwen3-32B"),
    ("Qwen3-30B-A3B", ["Qwen/Qwen3-30B-A3B"],
     "30.532", "3.3", 48, 4, 128, 2048, 151936, 40960, "bf16", False, None, 0, "Qwen/Qwen3-30B-A3B"),
    ("Mistral-7B-Instruct-v0.3", ["mistralai/Mistral-7B-Instruct-v0.3"],
     "7.248", None, 32, 8, 128, 4096, 32768, 32768, "bf16", False, None, 0, "mistralai/Mistral-7B-Instruct-v0.3"),
    ("Mistral-Nemo-Instruct-2407", ["mistralai/Mistral-Nemo-Instruct-2407"],
     "12.248", None, 40, 8, 128, 5120, 131072, 1024000, "bf16", False, None, 0,
     "mistralai/Mistral-Nemo-Instruct-2407"),
    ("Mistral-Small-24B-Instruct-2501", ["mistralai/Mistral-Small-24B-Instruct-2501"],
     "23.572", None, 40, 8, 128, 5120, 131072, 32768, "bf16", False, None, 0,
     "mistralai/Mistral-Small-24B-Instruct-2501"),
    ("Mixtral-8x7B-Instruct-v0.1", ["mistralai/Mixtral-8x7B-Instruct-v0.1"],
     "46.703", "12.879", 32, 8, 128, 4096, 32000, 32768, "bf16", False, None, 0,
     "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ("DeepSeek-R1-Distill-Qwen-1.5B", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"],
     "1.777", None, 28, 2, 128, 1536, 151936, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
    ("DeepSeek-R1-Distill-Qwen-7B", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"],
     "7.616", None, 28, 4, 128, 3584, 152064, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
    ("DeepSeek-R1-Distill-Qwen-14B", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-14B"],
     "14.770", None, 48, 8, 128, 5120, 152064, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B"),
    ("DeepSeek-R1-Distill-Qwen-32B", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"],
     "32.764", None, 64, 8, 128, 5120, 152064, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"),
    ("DeepSeek-R1-Distill-Llama-8B", ["deepseek-ai/DeepSeek-R1-Distill-Llama-8B"],
     "8.030", None, 32, 8, 128, 4096, 128256, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
    ("DeepSeek-R1-Distill-Llama-70B", ["deepseek-ai/DeepSeek-R1-Distill-Llama-70B"],
     "70.554", None, 80, 8, 128, 8192, 128256, 131072, "bf16", False, None, 0,
     "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"),
    ("gemma-2-9b-it", ["google/gemma-2-9b-it"],
     "9.242", None, 42, 8, 256, 3584, 256000, 8192, "bf16", True, 4096, 21, "google/gemma-2-9b-it"),
    ("gemma-2-27b-it", ["google/gemma-2-27b-it"],
     "27.227", None, 46, 16, 128, 4608, 256000, 8192, "bf16", True, 4096, 23, "google/gemma-2-27b-it"),
    ("gemma-3-12b-it", ["google/gemma-3-12b-it"],
     "12.187", None, 48, 8, 256, 3840, 262208, 131072, "bf16", True, 1024, 40, "google/gemma-3-12b-it"),
    ("gemma-3-27b-it", ["google/gemma-3-27b-it"],
     "27.432", None, 62, 16, 128, 5376, 262208, 131072, "bf16", True, 1024, 52, "google/gemma-3-27b-it"),
    ("Phi-3-mini-4k-instruct", ["microsoft/Phi-3-mini-4k-instruct"],
     "3.821", None, 32, 32, 96, 3072, 32064, 4096, "bf16", False, None, 0, "microsoft/Phi-3-mini-4k-instruct"),
    ("Phi-3.5-mini-instruct", ["microsoft/Phi-3.5-mini-instruct"],
     "3.821", None, 32, 32, 96, 3072, 32064, 131072, "bf16", False, None, 0, "microsoft/Phi-3.5-mini-instruct"),
    ("Phi-3-medium-4k-instruct", ["microsoft/Phi-3-medium-4k-instruct"],
     "13.960", None, 40, 10, 128, 5120, 32064, 4096, "bf16", False, None, 0, "microsoft/Phi-3-medium-4k-instruct"),
    ("phi-4", ["microsoft/phi-4"],
     "14.660", None, 40, 10, 128, 5120, 100352, 16384, "bf16", False, None, 0, "microsoft/phi-4"),
    ("gpt-oss-20b", ["openai/gpt-oss-20b"],
     "20.914", "3.611", 24, 8, 64, 2880, 201088, 131072, "mxfp4", False, 128, 12, "openai/gpt-oss-20b"),
    ("gpt-oss-120b", ["openai/gpt-oss-120b"],
     "116.829", "5.134", 36, 8, 64, 2880, 201088, 131072, "mxfp4", False, 128, 18, "openai/gpt-oss-120b"),
]


def seed(apps, schema_editor):
    # The database migrate runs on (apply_migrations uses `direct` behind a pooler): rows written through
    # `default` would be committed apart from this migration's transaction.
    db = schema_editor.connection.alias
    GpuModel = apps.get_model("profiles", "GpuModel")
    Preset = apps.get_model("profiles", "Preset")
    for name, memory_mib, match in GPU_MODELS:
        GpuModel.objects.using(db).create(name=name, memory_mib=memory_mib, match=match)
    default = Preset.objects.using(db).create(**DEFAULT_PRESET)
    for name, low, high, gpus, cores, description in PRESETS:
        Preset.objects.using(db).create(name=name, description=description, vgpu_memory_mib=estimate_mib(high, gpus),
                                        vgpu_cores_percent=cores, min_model_size_b=low, max_model_size_b=high,
                                        model_size_gpus=gpus)
    apps.get_model("profiles", "NamespacePolicy").objects.using(db).create(default_preset=default, **CATCH_ALL_POLICY)
    LanguageModel = apps.get_model("profiles", "LanguageModel")
    for (name, identifiers, params, active, layers, kv_heads, head_dim, hidden, vocab, context, dtype, tied,
         window, window_layers, repo) in LANGUAGE_MODELS:
        LanguageModel.objects.using(db).create(
            name=name, identifiers=identifiers, params_b=params, active_params_b=active, layers=layers,
            kv_heads=kv_heads, head_dim=head_dim, hidden_size=hidden, vocab_size=vocab, max_context=context,
            dtype=dtype, tied_embeddings=tied, sliding_window=window, sliding_window_layers=window_layers,
            source_url=f"https://huggingface.co/{repo}/blob/main/config.json")
    ConfigVersion = apps.get_model("profiles", "ConfigVersion")
    version = ConfigVersion.objects.using(db).create(pk=1, version=1).version
    if schema_editor.connection.vendor == "postgresql":
        # The change log's ids become the configuration version (profiles.ObjectChange): the first change must
        # be above the version the seeded configuration has, or it would not look like a change.
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, true)",
                           [apps.get_model("profiles", "ObjectChange")._meta.db_table, version])


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('profiles', '0001_initial'),
        ('profiles', '0002_default_presets'),
        ('profiles', '0003_scheduling_and_budgets'),
        ('profiles', '0004_api_tokens'),
        ('profiles', '0005_language_models'),
        ('profiles', '0006_preset_kv_cache_sequences'),
        ('profiles', '0007_change_log'),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ConfigVersion',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('version', models.BigIntegerField(default=0)),
                ('changed_at', models.DateTimeField(auto_now=True)),
            ],
            options={
            },
        ),
        migrations.CreateModel(
            name='GpuModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('name', models.CharField(help_text='For example A100-80GB.', max_length=64, unique=True)),
                ('memory_mib', models.PositiveIntegerField(help_text='Memory of one card in MiB (an 80 GB card has 81920).', validators=[django.core.validators.MinValueValidator(1)])),
                ('match', models.CharField(help_text='The substring Volcano matches against the card name in nvidia.com/use-gputype, e.g. A100.', max_length=64)),
                ('description', models.TextField(blank=True)),
            ],
            options={
                'verbose_name': 'GPU model',
                'ordering': ['name'],
                'constraints': [models.CheckConstraint(condition=models.Q(('memory_mib__gt', 0)), name='profiles_gpumodel_memory_positive', violation_error_message='GPU memory must be more than 0 MiB.')],
            },
        ),
        migrations.CreateModel(
            name='Preset',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('name', models.SlugField(max_length=63, unique=True)),
                ('description', models.TextField(blank=True)),
                ('vgpu_memory_mib', models.PositiveIntegerField(help_text='GPU memory per vGPU in MiB (written to volcano.sh/vgpu-memory).', validators=[django.core.validators.MinValueValidator(1)])),
                ('vgpu_cores_percent', models.PositiveSmallIntegerField(blank=True, help_text="Percent of a card's compute per vGPU (volcano.sh/vgpu-cores); empty for no reservation.", null=True, validators=[django.core.validators.MaxValueValidator(100)])),
                ('min_model_size_b', models.DecimalField(blank=True, decimal_places=3, help_text='Smallest model served, in billions of parameters (exclusive).', max_digits=9, null=True)),
                ('max_model_size_b', models.DecimalField(blank=True, decimal_places=3, help_text='Largest model served, in billions of parameters (inclusive).', max_digits=9, null=True)),
                ('cpu_request', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('cpu_limit', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('memory_request', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('memory_limit', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('enabled', models.BooleanField(default=True)),
                ('is_default', models.BooleanField(default=False, help_text='Used where no policy or annotation chooses a preset.')),
                ('gpu_model', models.ForeignKey(blank=True, help_text='Pins Pods to this card type and converts percentages with its memory.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='presets', to='profiles.gpumodel')),
                ('priority_class', models.CharField(blank=True, help_text="PriorityClass set on Pods this preset sizes when they name none (beats the namespace policy's). It must exist in the cluster: the API server refuses Pods naming a missing class.", max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")])),
                ('model_size_gpus', models.PositiveSmallIntegerField(default=1, help_text='GPUs a model of this size range is split over at this memory per vGPU (tensor parallelism). A Pod chosen by model size with another GPU count gets the per-card figure for its own count.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)])),
                ('kv_cache_sequences', models.PositiveSmallIntegerField(blank=True, help_text="Full-length sequences the KV cache is sized for when this preset's Pods are sized from their serving command; empty: the namespace policy's (default 1).", null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(256)])),
            ],
            options={
                'ordering': ['vgpu_memory_mib', 'name'],
                'constraints': [models.UniqueConstraint(condition=models.Q(('is_default', True)), fields=('is_default',), name='profiles_preset_single_default', violation_error_message='Only one preset can be the default.'), models.CheckConstraint(condition=models.Q(('is_default', False), ('enabled', True), _connector='OR'), name='profiles_preset_default_enabled', violation_error_message='The default preset must be enabled.'), models.CheckConstraint(condition=models.Q(('vgpu_memory_mib__gt', 0)), name='profiles_preset_memory_positive', violation_error_message='vGPU memory must be more than 0 MiB.'), models.CheckConstraint(condition=models.Q(('vgpu_cores_percent__isnull', True), ('vgpu_cores_percent__lte', 100), _connector='OR'), name='profiles_preset_cores_percent', violation_error_message='vGPU cores is a percentage: 0 to 100.'), models.CheckConstraint(condition=models.Q(('min_model_size_b__isnull', True), ('max_model_size_b__isnull', True), ('min_model_size_b__lt', models.F('max_model_size_b')), _connector='OR'), name='profiles_preset_model_size_range', violation_error_message='The smallest model size must be below the largest.')],
            },
        ),
        migrations.CreateModel(
            name='NamespacePolicy',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('namespace', models.CharField(help_text='An exact namespace, or a pattern such as team-* (exact beats pattern, longer pattern beats shorter).', max_length=253, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9*?\\[\\]-]([-a-z0-9*?\\[\\]]{0,251}[a-z0-9*?\\[\\]])?$', "Enter a namespace name (lowercase letters, digits, '-') or a pattern with * such as team-*.")])),
                ('description', models.TextField(blank=True)),
                ('mode', models.CharField(choices=[('enforce', 'enforce'), ('audit-only', 'audit-only'), ('off', 'off')], default='enforce', help_text='enforce: patch Pods; audit-only: record what would change, patch nothing; off: leave Pods alone.', max_length=16)),
                ('max_vgpus_per_pod', models.PositiveIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('max_vgpu_memory_mib', models.PositiveIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('scheduler_name', models.CharField(blank=True, default='volcano', max_length=63)),
                ('scheduler_scope', models.CharField(choices=[('gpu-pods', 'gpu-pods'), ('all-pods', 'all-pods')], default='gpu-pods', help_text='Whether the scheduler name is set on GPU Pods only or on every Pod.', max_length=16)),
                ('cpu_request', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('cpu_limit', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('memory_request', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('memory_limit', models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')])),
                ('deny_privileged', models.BooleanField(default=True, help_text='Deny GPU Pods with privileged containers (they escape vGPU isolation).')),
                ('allowed_presets', models.ManyToManyField(blank=True, help_text='Empty allows every enabled preset.', related_name='allowed_in_policies', to='profiles.preset')),
                ('default_preset', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='default_for_policies', to='profiles.preset')),
                ('allowed_queues', models.JSONField(blank=True, default=list, help_text='Volcano queues Pods here may name; empty allows any. The default queue must be one of them.')),
                ('budget_vgpu_memory_gib', models.PositiveIntegerField(blank=True, help_text='vGPU memory budget per namespace, in GiB: a ResourceQuota on requests.volcano.sh/vgpu-memory written by manage.py sync_quotas. Empty: no memory budget.', null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('budget_vgpu_number', models.PositiveIntegerField(blank=True, help_text='vGPU count budget per namespace: a ResourceQuota on requests.volcano.sh/vgpu-number written by manage.py sync_quotas. Empty: no count budget.', null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('default_queue', models.CharField(blank=True, help_text='Volcano queue set (scheduling.volcano.sh/queue-name) on Pods Volcano schedules that name none.', max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")])),
                ('priority_class', models.CharField(blank=True, help_text="PriorityClass set on the Pods this policy reaches when they name none (a preset's class beats it). It must exist in the cluster: the API server refuses Pods naming a missing class.", max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")])),
                ('infer_from_serving', models.BooleanField(default=True, help_text='Size GPU Pods that name no size from their serving command (vLLM, SGLang, TGI, llama.cpp, KServe): the model catalog, tensor parallelism and the context length. Off: the default preset.')),
                ('kv_cache_sequences', models.PositiveSmallIntegerField(default=1, help_text='Full-length sequences the KV cache is sized for when sizing from the serving command (1: the least the server starts with; more grants room for concurrent long requests).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(256)])),
            ],
            options={
                'verbose_name_plural': 'namespace policies',
                'ordering': ['namespace'],
                'constraints': [models.CheckConstraint(condition=models.Q(('mode__in', ['enforce', 'audit-only', 'off'])), name='profiles_namespacepolicy_mode_valid', violation_error_message='Mode must be enforce, audit-only or off.'), models.CheckConstraint(condition=models.Q(('scheduler_scope__in', ['gpu-pods', 'all-pods'])), name='profiles_namespacepolicy_scheduler_scope_valid', violation_error_message='Scheduler scope must be gpu-pods or all-pods.'), models.CheckConstraint(condition=models.Q(('budget_vgpu_memory_gib__isnull', True), ('budget_vgpu_memory_gib__gt', 0), _connector='OR'), name='profiles_namespacepolicy_budget_memory_positive', violation_error_message='The vGPU memory budget must be at least 1 GiB; leave it empty for none.'), models.CheckConstraint(condition=models.Q(('budget_vgpu_number__isnull', True), ('budget_vgpu_number__gt', 0), _connector='OR'), name='profiles_namespacepolicy_budget_number_positive', violation_error_message='The vGPU count budget must be at least 1; leave it empty for none.')],
            },
        ),
        migrations.CreateModel(
            name='NamespaceQuota',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('namespace', models.CharField(max_length=253, unique=True)),
                ('policy_namespace', models.CharField(help_text='The policy (namespace or pattern) whose budget it is.', max_length=253)),
                ('hard', models.JSONField(default=dict, help_text='spec.hard as sync_quotas wants it (resource -> quantity).')),
                ('status_hard', models.JSONField(default=dict, help_text='status.hard as last read from the cluster.')),
                ('status_used', models.JSONField(default=dict, help_text='status.used as last read from the cluster.')),
                ('action', models.CharField(help_text='What the last run did: created, updated, unchanged, failed.', max_length=16)),
                ('message', models.TextField(blank=True)),
                ('synced_at', models.DateTimeField()),
            ],
            options={
                'ordering': ['namespace'],
            },
        ),
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(help_text='SHA-256 of the token, hex.', max_length=64)),
                ('prefix', models.CharField(help_text="The token's first characters, to tell tokens apart.", max_length=12)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('expires_at', models.DateTimeField()),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'ordering': ['-created_at'],
                'constraints': [models.UniqueConstraint(fields=('digest',), name='profiles_apitoken_digest_unique', violation_error_message='This token exists already.')],
            },
        ),
        migrations.CreateModel(
            name='LanguageModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('name', models.CharField(help_text='For example Qwen2.5-7B-Instruct.', max_length=128, unique=True)),
                ('identifiers', models.JSONField(blank=True, default=list, help_text='Other names that mean this model: Hugging Face ids (Qwen/Qwen2.5-7B-Instruct), served names, GGUF file stems. Matched without the organisation, case, -Instruct/-it/-chat and quantization suffixes (-AWQ, -GPTQ-Int4, -FP8, Q4_K_M).')),
                ('params_b', models.DecimalField(decimal_places=3, help_text="Parameters, in billions (every expert's, for mixture-of-experts).", max_digits=9)),
                ('active_params_b', models.DecimalField(blank=True, decimal_places=3, help_text='Parameters used per token, for mixture-of-experts models.', max_digits=9, null=True)),
                ('layers', models.PositiveIntegerField(help_text='num_hidden_layers')),
                ('kv_heads', models.PositiveIntegerField(help_text='num_key_value_heads (num_attention_heads without GQA)')),
                ('head_dim', models.PositiveIntegerField(help_text='head_dim, or hidden_size / num_attention_heads')),
                ('hidden_size', models.PositiveIntegerField(help_text='hidden_size')),
                ('vocab_size', models.PositiveIntegerField(help_text='vocab_size')),
                ('max_context', models.PositiveIntegerField(help_text="max_position_embeddings: vLLM's default max-model-len.")),
                ('dtype', models.CharField(choices=[('bf16', 'bf16'), ('fp16', 'fp16'), ('fp32', 'fp32'), ('fp8', 'fp8'), ('mxfp4', 'mxfp4')], default='bf16', help_text="The weights' type as published (torch_dtype, or the quantization).", max_length=16)),
                ('tied_embeddings', models.BooleanField(default=False, help_text='tie_word_embeddings')),
                ('sliding_window', models.PositiveIntegerField(blank=True, help_text='sliding_window, for models whose some layers attend to a window only.', null=True)),
                ('sliding_window_layers', models.PositiveIntegerField(default=0, help_text='How many layers use the sliding window (Gemma 3: 5 of every 6).')),
                ('source_url', models.URLField(help_text="Where the numbers come from (the model's config.json).", max_length=300)),
                ('description', models.TextField(blank=True)),
            ],
            options={
                'verbose_name': 'language model',
                'ordering': ['name'],
                'constraints': [models.CheckConstraint(condition=models.Q(('params_b__gt', 0)), name='profiles_languagemodel_params_positive', violation_error_message='A model has more than 0 parameters.'), models.CheckConstraint(condition=models.Q(('active_params_b__isnull', True), ('active_params_b__lte', models.F('params_b')), _connector='OR'), name='profiles_languagemodel_active_params', violation_error_message='Active parameters cannot be more than the parameters.'), models.CheckConstraint(condition=models.Q(('layers__gt', 0), ('kv_heads__gt', 0), ('head_dim__gt', 0), ('hidden_size__gt', 0), ('vocab_size__gt', 0), ('max_context__gt', 0)), name='profiles_languagemodel_shape_positive', violation_error_message='Layers, KV heads, head dim, hidden size, vocabulary and context are more than 0.'), models.CheckConstraint(condition=models.Q(('sliding_window_layers__lte', models.F('layers'))), name='profiles_languagemodel_window_layers', violation_error_message='Sliding-window layers cannot be more than the layers.'), models.CheckConstraint(condition=models.Q(('dtype__in', ['bf16', 'fp16', 'fp32', 'fp8', 'mxfp4'])), name='profiles_languagemodel_dtype_valid', violation_error_message='The weight type is one of bf16, fp16, fp32, fp8, mxfp4.')],
            },
        ),
        migrations.CreateModel(
            name='ObjectChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('time', models.DateTimeField()),
                ('user_name', models.CharField(help_text="The user (or the API token's user), or system.", max_length=150)),
                ('through', models.CharField(choices=[('admin', 'Admin'), ('api', 'Api'), ('command', 'Command'), ('shell', 'Shell'), ('system', 'System')], max_length=16)),
                ('request_id', models.CharField(blank=True, help_text='The HTTP request (X-Request-Id) or command run that made the change.', max_length=64)),
                ('action', models.CharField(choices=[('create', 'Create'), ('update', 'Update'), ('delete', 'Delete')], max_length=16)),
                ('object_type', models.CharField(help_text='The model, e.g. preset, gpumodel, namespacepolicy.', max_length=64)),
                ('object_id', models.BigIntegerField()),
                ('object_repr', models.CharField(help_text="The object's name (a policy's namespace) after the change, before it for a delete.", max_length=253)),
                ('prechange_data', models.JSONField(blank=True, null=True)),
                ('postchange_data', models.JSONField(blank=True, null=True)),
                ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'configuration change',
                'ordering': ['-id'],
                'indexes': [models.Index(fields=['object_type', 'object_id', '-id'], name='objectchange_object'), models.Index(fields=['object_type', 'object_repr', '-id'], name='objectchange_name'), models.Index(fields=['user_name', '-id'], name='objectchange_user'), models.Index(fields=['time'], name='objectchange_time')],
            },
        ),
        # Reversed, the tables go and their rows with them.
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
