"""Functions that change configuration state."""

from __future__ import annotations

import json

import yaml
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from rest_framework.authtoken.models import Token

from mutations.engine import JsonObject

from .models import ConfigVersion, GpuModel, NamespacePolicy, Preset
from .selectors import preset_users


class ConfigurationInUse(Exception):
    """A preset or GPU model that other configuration still uses: `message` names the users."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class PodDocumentError(ValueError):
    """Text that is not one Pod in YAML or JSON."""


def config_version_bump(*, using: str = "default") -> None:
    """Raise the configuration version so every replica reloads its cached Catalog."""
    updated = ConfigVersion.objects.using(using).filter(pk=1).update(version=F("version") + 1)
    if not updated:
        ConfigVersion.objects.using(using).get_or_create(pk=1, defaults={"version": 1})


@transaction.atomic
def preset_save(*, preset: Preset) -> Preset:
    """Save a preset; making it the default moves the default off the previous one, in one transaction."""
    if preset.is_default:
        # Lock the current default so two concurrent moves cannot both pass; the partial unique
        # constraint stays the last line of defence.
        previous = list(Preset.objects.select_for_update().filter(is_default=True).exclude(pk=preset.pk))
        for row in previous:
            row.is_default = False
            row.save(update_fields=["is_default", "updated_at"])
    preset.save()
    return preset


@transaction.atomic
def preset_delete(*, preset: Preset) -> None:
    """Delete a preset no namespace policy uses and that is not the default; else raise ConfigurationInUse."""
    if preset.is_default:
        raise ConfigurationInUse(
            f"Preset {preset.name} is the default preset: make another preset the default before deleting it."
        )
    users = preset_users(preset=preset)
    if users:
        raise ConfigurationInUse(
            f"Preset {preset.name} is used by namespace policies {', '.join(users)} (as their default or allowed "
            "preset): change those policies first."
        )
    preset.delete()


@transaction.atomic
def gpu_model_save(*, gpu_model: GpuModel) -> GpuModel:
    """Save a GPU model."""
    gpu_model.save()
    return gpu_model


@transaction.atomic
def gpu_model_delete(*, gpu_model: GpuModel) -> None:
    """Delete a GPU model no preset pins to; else raise ConfigurationInUse naming the presets."""
    presets = sorted(gpu_model.presets.values_list("name", flat=True))
    if presets:
        raise ConfigurationInUse(
            f"GPU model {gpu_model.name} is used by presets {', '.join(presets)}: change those presets first."
        )
    gpu_model.delete()


@transaction.atomic
def namespace_policy_save(*, policy: NamespacePolicy, allowed_presets: list[Preset] | None = None) -> NamespacePolicy:
    """Save a namespace policy and, when given, replace its allowed presets."""
    policy.save()
    if allowed_presets is not None:
        policy.allowed_presets.set(allowed_presets)
    return policy


@transaction.atomic
def namespace_policy_delete(*, policy: NamespacePolicy) -> None:
    """Delete a namespace policy (its namespaces fall back to the next matching pattern)."""
    policy.delete()


def api_token_issue(*, username: str, rotate: bool = False) -> tuple[Token, bool]:
    """The REST API token of a user, created if missing (or replaced with rotate); returns (token, new)."""
    user = get_user_model().objects.get(**{get_user_model().USERNAME_FIELD: username})
    with transaction.atomic():
        if rotate:
            Token.objects.filter(user=user).delete()
        token, created = Token.objects.get_or_create(user=user)
    return token, created


def pod_document_parse(*, text: str | bytes) -> JsonObject:
    """One Pod from YAML or JSON text (a manifest as `kubectl apply -f` takes it); raise PodDocumentError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PodDocumentError(f"the Pod is not UTF-8 text: {exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PodDocumentError(f"the Pod is not valid YAML or JSON: {exc}") from exc
    if len(documents) != 1:
        raise PodDocumentError(f"expected one Pod, found {len(documents)} YAML documents")
    return pod_document_check(document=documents[0])


def pod_document_check(*, document: object) -> JsonObject:
    """The document if it is a Pod object (kind Pod or no kind); raise PodDocumentError saying what is wrong."""
    if not isinstance(document, dict):
        raise PodDocumentError(f"expected a Pod object, got {type(document).__name__}")
    kind = document.get("kind", "Pod")
    if kind != "Pod":
        hint = " (paste its spec.template as a Pod, with kind: Pod)" if isinstance(
            (document.get("spec") or {}).get("template") if isinstance(document.get("spec"), dict) else None, dict
        ) else ""
        raise PodDocumentError(f"expected kind: Pod, got kind: {kind}{hint}")
    if not isinstance(document.get("spec"), dict):
        raise PodDocumentError("the Pod has no spec")
    # YAML allows keys and values JSON has no form for (dates, non-string keys): the API server would not.
    try:
        copied: JsonObject = json.loads(json.dumps(document))
        return copied
    except (TypeError, ValueError) as exc:
        raise PodDocumentError(f"the Pod holds a value JSON cannot carry: {exc}") from exc
