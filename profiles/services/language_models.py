"""The model catalog's rules: what a LanguageModel must keep to be saved, saving and deleting it."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from mutations.engine import model_key

from ..models import WEIGHT_DTYPES, LanguageModel
from .validation import printable_name_problem

MAX_IDENTIFIERS = 32
MAX_IDENTIFIER_CHARS = 200



def language_model_validate(*, model: LanguageModel) -> dict[str, list[str]]:
    """What stops a catalog entry from being saved, by field (the constraints, and identifiers no other entry has)."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    name_problem = printable_name_problem(model.name, "A model's name")
    if name_problem:
        add("name", name_problem)
    if model.params_b is not None and model.params_b <= 0:
        add("params_b", "A model has more than 0 billion parameters, e.g. 7.616.")
    if model.active_params_b is not None and model.params_b is not None and model.active_params_b > model.params_b:
        add("active_params_b", f"Active parameters ({model.active_params_b}B) cannot be more than the parameters "
                               f"({model.params_b}B); leave it empty for a dense model.")
    for field in ("layers", "kv_heads", "head_dim", "hidden_size", "vocab_size", "max_context"):
        value = getattr(model, field)
        if value is not None and value <= 0:
            add(field, f"{field} is a whole number above 0, from the model's config.json.")
    if model.layers and model.sliding_window_layers and model.sliding_window_layers > model.layers:
        add("sliding_window_layers", f"At most the model's {model.layers} layers use the sliding window.")
    if model.sliding_window_layers and not model.sliding_window:
        add("sliding_window", "Give the window (sliding_window in config.json) for the layers that use one.")
    if model.chunked_attention_layers and not model.chunked_attention_size:
        add("chunked_attention_size", "Give the chunk (attention_chunk_size in config.json) for the layers that use "
                                      "chunked attention.")
    if model.layers and (model.sliding_window_layers or 0) + (model.chunked_attention_layers or 0) > model.layers:
        add("chunked_attention_layers", f"Sliding-window and chunked-attention layers together are at most the "
                                        f"model's {model.layers} layers.")
    if model.layers and model.kv_shared_layers and model.kv_shared_layers >= model.layers:
        add("kv_shared_layers", f"Fewer than the model's {model.layers} layers can share another layer's KV cache.")
    if model.attention_heads is not None and model.kv_heads and model.attention_heads < model.kv_heads:
        add("attention_heads", f"At least the {model.kv_heads} KV heads (num_attention_heads in config.json).")
    if model.vision_params_b is not None and model.params_b is not None and (
            model.vision_params_b < 0 or (model.vision_params_b and model.vision_params_b >= model.params_b)):
        add("vision_params_b", f"The vision tower is part of the {model.params_b}B parameters: 0 or more, less "
                               "than them.")
    if model.dtype not in WEIGHT_DTYPES:
        add("dtype", f"{model.dtype!r} is not a weight type; accepted: {', '.join(WEIGHT_DTYPES)}.")
    _identifier_problems(model, add)
    return problems


def _identifier_problems(model: LanguageModel, add: Callable[[str, str], None]) -> None:
    identifiers = model.identifiers
    if identifiers in (None, ""):
        identifiers = []
    if not isinstance(identifiers, list):
        add("identifiers", f"Give the identifiers as a list of names, e.g. [\"Qwen/Qwen2.5-7B-Instruct\"]; "
                           f"got {identifiers!r}.")
        return
    if len(identifiers) > MAX_IDENTIFIERS:
        add("identifiers", f"At most {MAX_IDENTIFIERS} identifiers; got {len(identifiers)}.")
    for value in identifiers:
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_IDENTIFIER_CHARS:
            add("identifiers", f"Each identifier is a model name of 1-{MAX_IDENTIFIER_CHARS} characters, such as "
                               f"Qwen/Qwen2.5-7B-Instruct; got {value!r}.")
        elif problem := printable_name_problem(value, f"Identifier {value!r}"):
            add("identifiers", problem)
    keys = {model_key(str(v)) for v in [model.name or "", *identifiers] if isinstance(v, str) and v.strip()}
    others = LanguageModel.objects.exclude(pk=model.pk).only("name", "identifiers")
    for other in others:
        clash = keys & {model_key(str(v)) for v in [other.name, *(other.identifiers or [])]}
        if clash:
            add("identifiers", f"{', '.join(sorted(clash))} already means catalog entry {other.name}: a name matches "
                               "one entry only (matching ignores case, the organisation, -Instruct/-it and "
                               "quantization suffixes).")


@transaction.atomic
def language_model_save(*, model: LanguageModel) -> LanguageModel:
    """Save a catalog entry (the configuration version is bumped on commit: profiles/signals.py)."""
    model.save()
    return model


@transaction.atomic
def language_model_delete(*, model: LanguageModel) -> None:
    """Delete a catalog entry: Pods serving it are sized from the size in its name again."""
    model.delete()
