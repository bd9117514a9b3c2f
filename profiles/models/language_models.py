"""The language model catalog: the architecture numbers that size a served model."""

from django.db import models
from django.db.models import F, Q

from .base import TimestampedModel

WEIGHT_DTYPES = ["bf16", "fp16", "fp32", "fp8", "mxfp4", "int8", "awq", "gptq-int4", "gptq-int8", "w4a16",
                 "bnb-4bit", "bitsandbytes-8bit"]  # as published, or the quantization (engine.memory.DTYPE_BYTES)


class LanguageModel(TimestampedModel):
    """An open model the webhook sizes Pods for: the architecture numbers from its published config.json."""

    name = models.CharField(
        verbose_name="name", max_length=128, unique=True, help_text="For example Qwen2.5-7B-Instruct.")
    identifiers = models.JSONField(
        verbose_name="identifiers",
        default=list, blank=True,
        help_text="Other names that mean this model: Hugging Face ids (Qwen/Qwen2.5-7B-Instruct), served names, "
                  "GGUF file stems. Matched without the organisation, case, -Instruct/-it/-chat and quantization "
                  "suffixes (-AWQ, -GPTQ-Int4, -FP8, Q4_K_M).",
    )
    params_b = models.DecimalField(verbose_name="parameters (billions)", max_digits=9, decimal_places=3,
                                   help_text="Parameters, in billions (every expert's, for mixture-of-experts).")
    active_params_b = models.DecimalField(
        verbose_name="active parameters per token (billions)", max_digits=9, decimal_places=3, null=True, blank=True,
                                          help_text="Parameters used per token, for mixture-of-experts models.")
    layers = models.PositiveIntegerField(verbose_name="layers", help_text="num_hidden_layers")
    kv_heads = models.PositiveIntegerField(
        verbose_name="KV heads", help_text="num_key_value_heads (num_attention_heads without GQA)")
    head_dim = models.PositiveIntegerField(
        verbose_name="head dimension", help_text="head_dim, or hidden_size / num_attention_heads")
    hidden_size = models.PositiveIntegerField(verbose_name="hidden size", help_text="hidden_size")
    vocab_size = models.PositiveIntegerField(verbose_name="vocabulary size", help_text="vocab_size")
    max_context = models.PositiveIntegerField(
        verbose_name="native context (tokens)", help_text="max_position_embeddings: vLLM's default max-model-len.")
    dtype = models.CharField(
        verbose_name="weight type", max_length=24, choices=[(d, d) for d in WEIGHT_DTYPES], default="bf16",
                             help_text="The weights' type as published (torch_dtype, or the quantization).")
    tied_embeddings = models.BooleanField(
        verbose_name="tied embeddings", default=False, help_text="tie_word_embeddings")
    sliding_window = models.PositiveIntegerField(
        verbose_name="sliding window (tokens)",
        null=True, blank=True, help_text="sliding_window, for models whose some layers attend to a window only.")
    sliding_window_layers = models.PositiveIntegerField(
        verbose_name="layers with a sliding window",
        default=0, help_text="How many layers use the sliding window (Gemma 3: 5 of every 6).")
    attention_heads = models.PositiveIntegerField(verbose_name="attention heads", null=True, blank=True,
                                                  help_text="num_attention_heads")
    chunked_attention_size = models.PositiveIntegerField(
        verbose_name="chunked attention size (tokens)", null=True, blank=True,
        help_text="attention_chunk_size (Llama 4: layers attending within chunks).")
    chunked_attention_layers = models.PositiveIntegerField(verbose_name="layers with chunked attention", default=0,
                                                           help_text="Layers with chunked attention.")
    kv_shared_layers = models.PositiveIntegerField(
        verbose_name="layers sharing KV", default=0,
        help_text="num_kv_shared_layers: layers reusing another layer's KV cache (Gemma 3n).")
    vision_params_b = models.DecimalField(
        verbose_name="vision tower parameters (billions)", max_digits=9, decimal_places=3, default=0,
        help_text="The vision tower's parameters in billions (part of params_b; kept 16-bit when quantized).")
    source_url = models.URLField(
        verbose_name="source URL", max_length=300, help_text="Where the numbers come from (the model's config.json).")
    description = models.TextField(verbose_name="description", blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "language model"
        constraints = [
            models.CheckConstraint(
                condition=Q(params_b__gt=0), name="%(app_label)s_%(class)s_params_positive",
                violation_error_message="A model has more than 0 parameters.",
            ),
            models.CheckConstraint(
                condition=Q(active_params_b__isnull=True) | Q(active_params_b__lte=F("params_b")),
                name="%(app_label)s_%(class)s_active_params",
                violation_error_message="Active parameters cannot be more than the parameters.",
            ),
            models.CheckConstraint(
                condition=Q(layers__gt=0) & Q(kv_heads__gt=0) & Q(head_dim__gt=0) & Q(hidden_size__gt=0)
                & Q(vocab_size__gt=0) & Q(max_context__gt=0),
                name="%(app_label)s_%(class)s_shape_positive",
                violation_error_message="Layers, KV heads, head dim, hidden size, vocabulary and context are "
                                        "more than 0.",
            ),
            models.CheckConstraint(
                condition=Q(sliding_window_layers__lte=F("layers") - F("chunked_attention_layers"))
                & Q(kv_shared_layers__lt=F("layers")), name="%(app_label)s_%(class)s_window_layers",
                violation_error_message="Sliding-window and chunked-attention layers together cannot be more than "
                                        "the layers; layers sharing KV are fewer.",
            ),
            models.CheckConstraint(
                condition=(Q(attention_heads__isnull=True) | Q(attention_heads__gte=F("kv_heads")))
                & Q(vision_params_b__gte=0) & Q(vision_params_b__lt=F("params_b")),
                name="%(app_label)s_%(class)s_heads_vision",
                violation_error_message="Attention heads are at least the KV heads; the vision tower is part of the "
                                        "parameters.",
            ),
            models.CheckConstraint(
                condition=Q(dtype__in=WEIGHT_DTYPES), name="%(app_label)s_%(class)s_dtype_valid",
                violation_error_message="The weight type is one of " + ", ".join(WEIGHT_DTYPES) + ".",
            ),
        ]

    def __str__(self) -> str:
        return self.name
