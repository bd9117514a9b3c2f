"""Issue 31: every configuration field labelled in words with its unit (verbose_name: no SQL), memory per vGPU at
most 1,048,576 MiB (a check constraint), a change's reason, and a policy's CPU/memory default that may be blank
(inherit the global policy's) or none.

Longer than 400 lines because Django writes each AlterField whole, and every field of the configuration changed
its label at once.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('profiles', '0010_language_model_architecture'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='objectchange',
            name='reason',
            field=models.TextField(blank=True, default='', help_text="Why the change was made, as its author gave it (a restore from the admin needs one; the admin's and the API's other changes may give one).", verbose_name='reason'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, verbose_name='created'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='digest',
            field=models.CharField(help_text='SHA-256 of the token, hex.', max_length=64, verbose_name='SHA-256 digest'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(verbose_name='expires'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='last_used_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='last used'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='prefix',
            field=models.CharField(help_text="The token's first characters, to tell tokens apart.", max_length=12, verbose_name='prefix'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL, verbose_name='user'),
        ),
        migrations.AlterField(
            model_name='configversion',
            name='changed_at',
            field=models.DateTimeField(auto_now=True, verbose_name='last changed'),
        ),
        migrations.AlterField(
            model_name='configversion',
            name='version',
            field=models.BigIntegerField(default=0, verbose_name='configuration version'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, verbose_name='created'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='description',
            field=models.TextField(blank=True, verbose_name='description'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='match',
            field=models.CharField(help_text='The substring Volcano matches against the card name in nvidia.com/use-gputype, e.g. A100.', max_length=64, verbose_name='device name match'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='memory_mib',
            field=models.PositiveIntegerField(help_text='Memory of one card in MiB (an 80 GB card has 81920).', validators=[django.core.validators.MinValueValidator(1)], verbose_name='memory (MiB)'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='name',
            field=models.CharField(help_text='For example A100-80GB.', max_length=64, unique=True, verbose_name='name'),
        ),
        migrations.AlterField(
            model_name='gpumodel',
            name='updated_at',
            field=models.DateTimeField(auto_now=True, verbose_name='last changed'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='active_params_b',
            field=models.DecimalField(blank=True, decimal_places=3, help_text='Parameters used per token, for mixture-of-experts models.', max_digits=9, null=True, verbose_name='active parameters per token (billions)'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, verbose_name='created'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='description',
            field=models.TextField(blank=True, verbose_name='description'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='head_dim',
            field=models.PositiveIntegerField(help_text='head_dim, or hidden_size / num_attention_heads', verbose_name='head dimension'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='hidden_size',
            field=models.PositiveIntegerField(help_text='hidden_size', verbose_name='hidden size'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='identifiers',
            field=models.JSONField(blank=True, default=list, help_text='Other names that mean this model: Hugging Face ids (Qwen/Qwen2.5-7B-Instruct), served names, GGUF file stems. Matched without the organisation, case, -Instruct/-it/-chat and quantization suffixes (-AWQ, -GPTQ-Int4, -FP8, Q4_K_M).', verbose_name='identifiers'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='kv_heads',
            field=models.PositiveIntegerField(help_text='num_key_value_heads (num_attention_heads without GQA)', verbose_name='KV heads'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='layers',
            field=models.PositiveIntegerField(help_text='num_hidden_layers', verbose_name='layers'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='max_context',
            field=models.PositiveIntegerField(help_text="max_position_embeddings: vLLM's default max-model-len.", verbose_name='native context (tokens)'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='name',
            field=models.CharField(help_text='For example Qwen2.5-7B-Instruct.', max_length=128, unique=True, verbose_name='name'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='params_b',
            field=models.DecimalField(decimal_places=3, help_text="Parameters, in billions (every expert's, for mixture-of-experts).", max_digits=9, verbose_name='parameters (billions)'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='sliding_window',
            field=models.PositiveIntegerField(blank=True, help_text='sliding_window, for models whose some layers attend to a window only.', null=True, verbose_name='sliding window (tokens)'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='sliding_window_layers',
            field=models.PositiveIntegerField(default=0, help_text='How many layers use the sliding window (Gemma 3: 5 of every 6).', verbose_name='layers with a sliding window'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='source_url',
            field=models.URLField(help_text="Where the numbers come from (the model's config.json).", max_length=300, verbose_name='source URL'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='tied_embeddings',
            field=models.BooleanField(default=False, help_text='tie_word_embeddings', verbose_name='tied embeddings'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='updated_at',
            field=models.DateTimeField(auto_now=True, verbose_name='last changed'),
        ),
        migrations.AlterField(
            model_name='languagemodel',
            name='vocab_size',
            field=models.PositiveIntegerField(help_text='vocab_size', verbose_name='vocabulary size'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='allowed_presets',
            field=models.ManyToManyField(blank=True, help_text='Empty allows every enabled preset.', related_name='allowed_in_policies', to='profiles.preset', verbose_name='allowed presets'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='allowed_queues',
            field=models.JSONField(blank=True, default=list, help_text='Volcano queues Pods here may name; empty allows any. The default queue must be one of them.', verbose_name='allowed Volcano queues'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='budget_vgpu_memory_gib',
            field=models.PositiveIntegerField(blank=True, help_text='vGPU memory budget per namespace, in GiB: a ResourceQuota on requests.volcano.sh/vgpu-memory written by manage.py sync_quotas. Empty: no memory budget.', null=True, validators=[django.core.validators.MinValueValidator(1)], verbose_name='budget: vGPU memory (GiB)'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='budget_vgpu_number',
            field=models.PositiveIntegerField(blank=True, help_text='vGPU count budget per namespace: a ResourceQuota on requests.volcano.sh/vgpu-number written by manage.py sync_quotas. Empty: no count budget.', null=True, validators=[django.core.validators.MinValueValidator(1)], verbose_name='budget: vGPUs'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='cpu_limit',
            field=models.CharField(blank=True, help_text="Blank: the global policy's (*) value; none: no default here.", max_length=32, validators=[django.core.validators.RegexValidator('^(none|[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$', "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi, none for no default, or leave it blank to inherit the global policy's.")], verbose_name='CPU limit'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='cpu_request',
            field=models.CharField(blank=True, help_text="Blank: the global policy's (*) value; none: no default here.", max_length=32, validators=[django.core.validators.RegexValidator('^(none|[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$', "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi, none for no default, or leave it blank to inherit the global policy's.")], verbose_name='CPU request'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, verbose_name='created'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='default_preset',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='default_for_policies', to='profiles.preset', verbose_name='default preset'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='default_queue',
            field=models.CharField(blank=True, help_text='Volcano queue set (scheduling.volcano.sh/queue-name) on Pods Volcano schedules that name none.', max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")], verbose_name='default Volcano queue'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='deny_privileged',
            field=models.BooleanField(default=True, help_text='Deny GPU Pods with privileged containers (they escape vGPU isolation).', verbose_name='deny privileged GPU Pods'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='description',
            field=models.TextField(blank=True, verbose_name='description'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='infer_from_serving',
            field=models.BooleanField(default=True, help_text='Size GPU Pods that name no size from their serving command (vLLM, SGLang, TGI, llama.cpp, KServe): the model catalog, tensor parallelism and the context length. Off: the default preset.', verbose_name='size from the serving command'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='kv_cache_sequences',
            field=models.PositiveSmallIntegerField(default=1, help_text='Full-length sequences the KV cache is sized for when sizing from the serving command (1: the least the server starts with; more grants room for concurrent long requests).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(256)], verbose_name='KV cache sequences'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='max_vgpu_memory_mib',
            field=models.PositiveIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1048576, message='At most 1,048,576 MiB (1,024 GiB) per vGPU: no GPU has more.')], verbose_name='most memory per vGPU (MiB)'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='max_vgpus_per_pod',
            field=models.PositiveIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1)], verbose_name='most vGPUs per Pod'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='memory_limit',
            field=models.CharField(blank=True, help_text="Blank: the global policy's (*) value; none: no default here.", max_length=32, validators=[django.core.validators.RegexValidator('^(none|[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$', "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi, none for no default, or leave it blank to inherit the global policy's.")], verbose_name='memory limit'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='memory_request',
            field=models.CharField(blank=True, help_text="Blank: the global policy's (*) value; none: no default here.", max_length=32, validators=[django.core.validators.RegexValidator('^(none|[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$', "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi, none for no default, or leave it blank to inherit the global policy's.")], verbose_name='memory request'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='mode',
            field=models.CharField(choices=[('enforce', 'enforce'), ('audit-only', 'audit-only'), ('off', 'off')], default='enforce', help_text='enforce: patch Pods; audit-only: record what would change, patch nothing; off: leave Pods alone.', max_length=16, verbose_name='mode'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='namespace',
            field=models.CharField(help_text='An exact namespace, or a pattern such as team-* (exact beats pattern, longer pattern beats shorter).', max_length=253, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9*?\\[\\]-]([-a-z0-9*?\\[\\]]{0,251}[a-z0-9*?\\[\\]])?$', "Enter a namespace name (lowercase letters, digits, '-') or a pattern with * such as team-*.")], verbose_name='namespace'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='priority_class',
            field=models.CharField(blank=True, help_text="PriorityClass set on the Pods this policy reaches when they name none (a preset's class beats it). It must exist in the cluster: the API server refuses Pods naming a missing class.", max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")], verbose_name='PriorityClass'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='scheduler_name',
            field=models.CharField(blank=True, default='volcano', max_length=63, verbose_name='scheduler name'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='scheduler_scope',
            field=models.CharField(choices=[('gpu-pods', 'gpu-pods'), ('all-pods', 'all-pods')], default='gpu-pods', help_text='Whether the scheduler name is set on GPU Pods only or on every Pod.', max_length=16, verbose_name='scheduler scope'),
        ),
        migrations.AlterField(
            model_name='namespacepolicy',
            name='updated_at',
            field=models.DateTimeField(auto_now=True, verbose_name='last changed'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='action',
            field=models.CharField(help_text='What the last run did: created, updated, unchanged, failed.', max_length=16, verbose_name='last action'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='hard',
            field=models.JSONField(default=dict, help_text='spec.hard as sync_quotas wants it (resource -> quantity).', verbose_name='quota wanted (spec.hard)'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='message',
            field=models.TextField(blank=True, verbose_name='message'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='namespace',
            field=models.CharField(max_length=253, unique=True, verbose_name='namespace'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='policy_namespace',
            field=models.CharField(help_text='The policy (namespace or pattern) whose budget it is.', max_length=253, verbose_name='policy (namespace pattern)'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='status_hard',
            field=models.JSONField(default=dict, help_text='status.hard as last read from the cluster.', verbose_name='quota in the cluster (status.hard)'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='status_used',
            field=models.JSONField(default=dict, help_text='status.used as last read from the cluster.', verbose_name='used in the cluster (status.used)'),
        ),
        migrations.AlterField(
            model_name='namespacequota',
            name='synced_at',
            field=models.DateTimeField(verbose_name='synced'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='action',
            field=models.CharField(choices=[('create', 'Create'), ('update', 'Update'), ('delete', 'Delete')], max_length=16, verbose_name='action'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='object_id',
            field=models.BigIntegerField(verbose_name='object id'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='object_repr',
            field=models.CharField(help_text="The object's name (a policy's namespace) after the change, before it for a delete.", max_length=253, verbose_name='object'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='object_type',
            field=models.CharField(help_text='The model, e.g. preset, gpumodel, namespacepolicy.', max_length=64, verbose_name='object type'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='postchange_data',
            field=models.JSONField(blank=True, null=True, verbose_name='after'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='prechange_data',
            field=models.JSONField(blank=True, null=True, verbose_name='before'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='request_id',
            field=models.CharField(blank=True, help_text='The HTTP request (X-Request-Id) or command run that made the change.', max_length=64, verbose_name='request id'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='through',
            field=models.CharField(choices=[('admin', 'Admin'), ('api', 'Api'), ('command', 'Command'), ('shell', 'Shell'), ('system', 'System')], max_length=16, verbose_name='made through'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='time',
            field=models.DateTimeField(verbose_name='time'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='user',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='user'),
        ),
        migrations.AlterField(
            model_name='objectchange',
            name='user_name',
            field=models.CharField(help_text="The user (or the API token's user), or system.", max_length=150, verbose_name='user name'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='cpu_limit',
            field=models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')], verbose_name='CPU limit'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='cpu_request',
            field=models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')], verbose_name='CPU request'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, verbose_name='created'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='description',
            field=models.TextField(blank=True, verbose_name='description'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='enabled',
            field=models.BooleanField(default=True, verbose_name='enabled'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='gpu_model',
            field=models.ForeignKey(blank=True, help_text='Pins Pods to this card type and converts percentages with its memory.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='presets', to='profiles.gpumodel', verbose_name='GPU model'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='is_default',
            field=models.BooleanField(default=False, help_text='Used where no policy or annotation chooses a preset.', verbose_name='global default'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='kv_cache_sequences',
            field=models.PositiveSmallIntegerField(blank=True, help_text="Full-length sequences the KV cache is sized for when this preset's Pods are sized from their serving command; empty: the namespace policy's (default 1).", null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(256)], verbose_name='KV cache sequences'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='max_model_size_b',
            field=models.DecimalField(blank=True, decimal_places=3, help_text='Largest model served, in billions of parameters (inclusive).', max_digits=9, null=True, verbose_name='largest model size (billions of parameters)'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='memory_limit',
            field=models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')], verbose_name='memory limit'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='memory_request',
            field=models.CharField(blank=True, max_length=32, validators=[django.core.validators.RegexValidator('^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$', 'Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.')], verbose_name='memory request'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='min_model_size_b',
            field=models.DecimalField(blank=True, decimal_places=3, help_text='Smallest model served, in billions of parameters (exclusive).', max_digits=9, null=True, verbose_name='smallest model size (billions of parameters)'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='model_size_gpus',
            field=models.PositiveSmallIntegerField(default=1, help_text='GPUs a model of this size range is split over at this memory per vGPU (tensor parallelism). A Pod chosen by model size with another GPU count gets the per-card figure for its own count.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)], verbose_name='GPUs its model sizes are for'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='name',
            field=models.SlugField(max_length=63, unique=True, verbose_name='name'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='priority_class',
            field=models.CharField(blank=True, help_text="PriorityClass set on Pods this preset sizes when they name none (beats the namespace policy's). It must exist in the cluster: the API server refuses Pods naming a missing class.", max_length=253, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$', "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")], verbose_name='PriorityClass'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='updated_at',
            field=models.DateTimeField(auto_now=True, verbose_name='last changed'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='vgpu_cores_percent',
            field=models.PositiveSmallIntegerField(blank=True, help_text="Percent of a card's compute per vGPU (volcano.sh/vgpu-cores); empty for no reservation.", null=True, validators=[django.core.validators.MaxValueValidator(100)], verbose_name='cores per vGPU (%)'),
        ),
        migrations.AlterField(
            model_name='preset',
            name='vgpu_memory_mib',
            field=models.PositiveIntegerField(help_text='GPU memory per vGPU in MiB (written to volcano.sh/vgpu-memory).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1048576, message='At most 1,048,576 MiB (1,024 GiB) per vGPU: no GPU has more.')], verbose_name='memory per vGPU (MiB)'),
        ),
        migrations.AddConstraint(
            model_name='namespacepolicy',
            constraint=models.CheckConstraint(condition=models.Q(('max_vgpu_memory_mib__isnull', True), ('max_vgpu_memory_mib__lte', 1048576), _connector='OR'), name='profiles_namespacepolicy_memory_at_most', violation_error_message='The most memory per vGPU is at most 1,048,576 MiB.'),
        ),
        migrations.AddConstraint(
            model_name='preset',
            constraint=models.CheckConstraint(condition=models.Q(('vgpu_memory_mib__lte', 1048576)), name='profiles_preset_memory_at_most', violation_error_message='vGPU memory is at most 1,048,576 MiB.'),
        ),
    ]
