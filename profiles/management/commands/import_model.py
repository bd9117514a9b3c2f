"""manage.py import_model: add a model to the catalog from its own files, on disk or on the Hugging Face Hub."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from profiles.services import (
    LanguageModelImportError,
    language_model_import,
    model_file_header,
    model_file_json,
)

CONFIG, INDEX, SINGLE = "config.json", "model.safetensors.index.json", "model.safetensors"


def header_bytes(path: Path) -> bytes:
    """The first bytes of a .safetensors file up to the end of its JSON header (not the weights)."""
    with path.open("rb") as handle:
        start = handle.read(8)
        if len(start) < 8:
            return start
        (length,) = struct.unpack("<Q", start)
        return start + handle.read(min(length, 100 * 2**20))


class Command(BaseCommand):
    help = "Add a model to the catalog from its config.json (and safetensors index or header): a directory or a Hub id."

    def add_arguments(self, parser):
        parser.add_argument("source", help="A directory holding config.json (and model.safetensors.index.json or "
                                           "model.safetensors), a config.json file, or a Hugging Face Hub id such "
                                           "as Qwen/Qwen2.5-7B-Instruct (fetched with HF_TOKEN when set).")
        parser.add_argument("--name", help="The catalog name (default: the directory's or the repository's name).")
        parser.add_argument("--identifier", action="append", default=[],
                            help="Another name that means this model (repeatable); a Hub id is added by itself.")
        parser.add_argument("--index", help="model.safetensors.index.json, when SOURCE is a config.json file.")
        parser.add_argument("--safetensors", help="A .safetensors file whose header gives the exact parameter count.")
        parser.add_argument("--revision", help="The Hub revision (branch, tag or commit) to read.")
        parser.add_argument("--source-url", help="Where the files come from (default for a Hub id or a config whose "
                                                 "_name_or_path is one: its config.json on the Hub).")
        parser.add_argument("--replace", action="store_true", help="Update the entry if the name exists.")

    def handle(self, *args, source: str, name: str | None, identifier: list[str], index: str | None,
               safetensors: str | None, revision: str | None, source_url: str | None, replace: bool, **options):
        path = Path(source)
        identifiers = list(identifier)
        if path.exists():
            files = self._local(path, index, safetensors)
            # A directory is named for the model (Hugging Face's snapshot layout); a lone file may be org--name.json.
            default_name = path.resolve().name if path.is_dir() else path.stem.rsplit("--", 1)[-1]
            origin = str(files["config"].get("_name_or_path") or "")
            if source_url:
                url = source_url
            elif origin.count("/") == 1 and not origin.startswith((".", "/")):
                url = f"https://huggingface.co/{origin}/blob/main/config.json"
            else:
                raise CommandError(f"{source}: say where these files come from with --source-url (the catalog "
                                   "records the source of every number)")
        elif source.count("/") == 1 and not source.startswith((".", "/")):
            files = self._hub(source, revision)
            default_name = source.split("/", 1)[1]
            identifiers.append(source)
            url = source_url or f"https://huggingface.co/{source}/blob/{revision or 'main'}/config.json"
        else:
            raise CommandError(f"{source}: no such file or directory, and not a Hub id (organisation/name)")
        try:
            row = language_model_import(name=name or default_name, identifiers=identifiers, source_url=url,
                                        replace=replace, **files)
        except LanguageModelImportError as error:
            raise CommandError(f"{source}: {error}") from None
        self.stdout.write(f"{row.name}: {row.params_b}B parameters, {row.layers} layers, {row.kv_heads} KV heads of "
                          f"{row.head_dim}, context {row.max_context:,}, {row.dtype} ({url})")

    def _local(self, path: Path, index: str | None, safetensors: str | None) -> dict[str, Any]:
        folder = path if path.is_dir() else path.parent
        config_path = folder / CONFIG if path.is_dir() else path
        index_path = Path(index) if index else folder / INDEX
        single = Path(safetensors) if safetensors else folder / SINGLE
        try:
            config = model_file_json(data=config_path.read_bytes(), field=CONFIG)
            found = {"config": config, "index": None, "header": None}
            if safetensors or single.is_file():
                found["header"] = model_file_header(data=header_bytes(single))
            elif index or index_path.is_file():
                found["index"] = model_file_json(data=index_path.read_bytes(), field=INDEX)
        except OSError as error:
            raise CommandError(f"cannot read {error.filename}: {error.strerror}") from None
        except LanguageModelImportError as error:
            raise CommandError(str(error)) from None
        return found

    def _hub(self, repo_id: str, revision: str | None) -> dict[str, Any]:
        """config.json and every safetensors header's tensor shapes, through huggingface_hub (HF_TOKEN: gated)."""
        import huggingface_hub
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

        token = os.environ.get("HF_TOKEN") or None
        try:
            config_path = huggingface_hub.hf_hub_download(repo_id, CONFIG, revision=revision, token=token)
            config = model_file_json(data=Path(config_path).read_bytes(), field=CONFIG)
        except (HfHubHTTPError, OSError) as error:
            raise CommandError(f"{repo_id}: could not read {CONFIG} from the Hub ({error}); for a gated model set "
                               "HF_TOKEN, or download the files and pass their directory") from None
        except LanguageModelImportError as error:
            raise CommandError(f"{repo_id}: {error}") from None
        try:
            metadata = huggingface_hub.get_safetensors_metadata(repo_id, revision=revision, token=token)
        except (EntryNotFoundError, HfHubHTTPError, OSError, ValueError) as error:
            self.stderr.write(f"{repo_id}: no safetensors metadata ({error}); the parameters are counted from "
                              "config.json's shapes")
            return {"config": config, "index": None, "header": None}
        header = {name: {"dtype": tensor.dtype, "shape": list(tensor.shape)}
                  for file in metadata.files_metadata.values() for name, tensor in file.tensors.items()}
        return {"config": config, "index": None, "header": header}
