"""Functions that change configuration state."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from datetime import timedelta

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from mutations.engine import JsonObject

from .changes.recorder import configuration_lock
from .models import ApiToken, GpuModel, NamespacePolicy, Preset
from .selectors import preset_users


class ConfigurationInUse(Exception):
    """A preset or GPU model that other configuration still uses: `message` names the users."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class PodDocumentError(ValueError):
    """Text that is not one Pod in YAML or JSON."""


# A Pod manifest is a few KiB. YAML aliases (*name) repeat a node without repeating its text: a 531-byte
# document of nested aliases expanded to gigabytes ("billion laughs"). So the text, its aliases and the
# expanded document are all bounded: at most MAX_YAML_ALIASES aliases expand a document by at most
# 2**5, and the expanded JSON is checked too.
MAX_POD_DOCUMENT_CHARS = 512 * 1024
MAX_YAML_ALIASES = 10
MAX_POD_JSON_BYTES = 2 * 1024 * 1024
# Flow collections ([...], {...}) open at once: a Pod nests a few levels. PyYAML's scanner is quadratic in this
# depth (about 0.7 s of CPU for 5,000 levels before it recurses out), so deeper text is refused unparsed.
# Brackets inside quoted strings count too: a Pod would need this many unclosed ones to be refused wrongly.
MAX_POD_FLOW_DEPTH = 100
_FLOW_BRACKETS = re.compile(r"[\[\]{}]")


class _BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only), refusing more than MAX_YAML_ALIASES aliases."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise PodDocumentError(f"the Pod uses more than {MAX_YAML_ALIASES} YAML aliases (*name); "
                                       "write the repeated parts out")
        return super().compose_node(parent, index)


@transaction.atomic
def preset_save(*, preset: Preset) -> Preset:
    """Save a preset; making it the default moves the default off the previous one, in one transaction."""
    if preset.is_default:
        configuration_lock()  # the version's lock first, as every configuration change takes it (no deadlock)
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


TOKEN_PREFIX = "vi_"  # noqa: S105 - a public marker at the start of every token, not a secret


def api_token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256 (a token is 256 random bits; a slow hash would add nothing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_issue(*, username: str, rotate: bool = False, days: int | None = None) -> tuple[str, ApiToken]:
    """A new REST API token for a user, valid for `days` (INJECTOR_API_TOKEN_DAYS by default); with rotate,
    the user's other tokens are revoked. Returns (the token, its row): the token is never stored, only its digest."""
    user = get_user_model().objects.get(**{get_user_model().USERNAME_FIELD: username})
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    days = settings.INJECTOR_API_TOKEN_DAYS if days is None else days
    with transaction.atomic():
        if rotate:
            ApiToken.objects.filter(user=user).delete()
        row = ApiToken.objects.create(user=user, digest=api_token_digest(token), prefix=token[:12],
                                      expires_at=timezone.now() + timedelta(days=days))
    return token, row


def pod_document_parse(*, text: str | bytes) -> JsonObject:
    """One Pod from YAML or JSON text (a manifest as `kubectl apply -f` takes it); raise PodDocumentError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PodDocumentError(f"the Pod is not UTF-8 text: {exc}") from exc
    if len(text) > MAX_POD_DOCUMENT_CHARS:
        raise PodDocumentError(f"the Pod is {len(text)} characters long; accepted: at most {MAX_POD_DOCUMENT_CHARS}")
    if _flow_depth_over(text, MAX_POD_FLOW_DEPTH):
        raise PodDocumentError("the Pod is nested too deeply to be a Pod")
    try:
        documents = [d for d in yaml.load_all(text, Loader=_BoundedSafeLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise PodDocumentError(f"the Pod is not valid YAML or JSON: {exc}") from exc
    except RecursionError:
        raise PodDocumentError("the Pod is nested too deeply to be a Pod") from None
    if len(documents) != 1:
        raise PodDocumentError(f"expected one Pod, found {len(documents)} YAML documents")
    return pod_document_check(document=documents[0])


def _flow_depth_over(text: str, limit: int) -> bool:
    depth = 0
    for bracket in _FLOW_BRACKETS.finditer(text):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(0, depth - 1)
    return False


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
    # YAML allows keys and values JSON has no form for (dates, non-string keys, .inf and .nan): the API
    # server would not.
    try:
        text = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PodDocumentError(f"the Pod holds a value JSON cannot carry (JSON has no infinity or NaN, and "
                               f"only string keys): {exc}") from exc
    if len(text) > MAX_POD_JSON_BYTES:
        raise PodDocumentError(f"the Pod is {len(text)} bytes as JSON; accepted: at most {MAX_POD_JSON_BYTES}")
    copied: JsonObject = json.loads(text)
    return copied
