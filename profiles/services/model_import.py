"""A catalog entry from a model's own files (config.json, a safetensors index or header): import_model and the API."""

from __future__ import annotations

import json
import struct
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from mutations.engine import LanguageModelSpec
from mutations.engine.model_files import ModelFileError, language_model_from_files, safetensors_header_read

from ..models import LanguageModel
from .language_models import language_model_save, language_model_validate

MAX_JSON_FILE_BYTES = 16 * 2**20  # a config.json is a few KB, the largest safetensors index a few MB
MAX_HEADER_BYTES = 100 * 2**20    # the safetensors format's own limit on its header


class LanguageModelImportError(Exception):
    """Files that do not make a catalog entry: the problems by field (a file and key, or the entry's field)."""

    def __init__(self, problems: dict[str, list[str]]):
        super().__init__("; ".join(f"{field}: {' '.join(messages)}" for field, messages in problems.items()))
        self.problems = problems


def model_file_json(*, data: bytes, field: str) -> dict[str, Any]:
    """A model's JSON file (config.json, the safetensors index) as a dict; unreadable is an import error naming it."""
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LanguageModelImportError({field: [f"not JSON: {error}"]}) from None
    if not isinstance(value, dict):
        raise LanguageModelImportError({field: ["expected a JSON object"]})
    return value


def model_file_header(*, data: bytes) -> dict[str, Any]:
    """The header at the start of a .safetensors file (only the header's bytes are needed)."""
    try:
        return safetensors_header_read(data)
    except ModelFileError as error:
        raise LanguageModelImportError({error.field: [error.message]}) from None


@transaction.atomic
def language_model_import(*, name: str, config: dict[str, Any], index: dict[str, Any] | None = None,
                          header: dict[str, Any] | None = None, identifiers: list[str] | None = None,
                          source_url: str = "", replace: bool = False) -> LanguageModel:
    """Create (or with `replace`, update) the catalog entry a model's own files describe."""
    try:
        spec = language_model_from_files(name=name, config=config, index=index, header=header, source_url=source_url)
    except ModelFileError as error:
        raise LanguageModelImportError({error.field: [error.message]}) from None
    existing = LanguageModel.objects.select_for_update().filter(name=name).first()
    if existing is not None and not replace:
        message = f"catalog entry {name} exists; replace it, or import under another name"
        raise LanguageModelImportError({"name": [message]})
    row = existing or LanguageModel(name=name)
    language_model_fill(row=row, spec=spec)
    row.identifiers = sorted({*(existing.identifiers if existing else []), *(identifiers or [])} - {name})
    row.source_url = source_url or row.source_url
    problems = language_model_validate(model=row)
    if not row.source_url:
        problems.setdefault("source_url", []).append("Say where the files come from (the config.json's URL).")
    if problems:
        raise LanguageModelImportError(problems)
    try:
        row.full_clean(exclude=["identifiers"])
    except ValidationError as error:
        raise LanguageModelImportError({k: [str(m) for m in v] for k, v in error.message_dict.items()}) from None
    return language_model_save(model=row)


def language_model_fill(*, row: LanguageModel, spec: LanguageModelSpec) -> None:
    """Copy the architecture numbers of an engine spec onto a catalog row."""
    row.params_b = Decimal(str(spec.params_b))
    row.active_params_b = Decimal(str(spec.active_params_b)) if spec.active_params_b else None
    row.vision_params_b = Decimal(str(spec.vision_params_b))
    for field in ("layers", "kv_heads", "head_dim", "hidden_size", "vocab_size", "dtype", "tied_embeddings",
                  "sliding_window", "sliding_window_layers", "attention_heads", "chunked_attention_size",
                  "chunked_attention_layers", "kv_shared_layers"):
        setattr(row, field, getattr(spec, field))
    row.max_context = spec.max_context



def model_upload_json(*, upload: Any, field: str) -> dict[str, Any]:
    """An uploaded JSON file (Django's UploadedFile) as a dict, refused past MAX_JSON_FILE_BYTES."""
    if upload.size > MAX_JSON_FILE_BYTES:
        raise LanguageModelImportError({field: [f"{upload.size:,} bytes; at most {MAX_JSON_FILE_BYTES:,}."]})
    return model_file_json(data=upload.read(), field=field)


def model_upload_header(*, upload: Any) -> dict[str, Any]:
    """Only the header of an uploaded .safetensors file (its first 8 bytes give the header's length)."""
    start = upload.read(8)
    if len(start) == 8:
        (length,) = struct.unpack("<Q", start)
        start += upload.read(min(length, MAX_HEADER_BYTES))
    return model_file_header(data=start)
