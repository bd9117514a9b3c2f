"""Saving and deleting presets, GPU models, namespace policies and oversubscription policies (each logged by
profiles.changes)."""

from __future__ import annotations

from django.db import transaction

from ..changes.recorder import configuration_lock
from ..models import GpuModel, NamespacePolicy, OversubscriptionPolicy, Preset
from ..selectors import preset_users


class ConfigurationInUse(Exception):
    """A preset or GPU model that other configuration still uses: `message` names the users."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


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


@transaction.atomic
def oversubscription_policy_save(*, policy: OversubscriptionPolicy) -> OversubscriptionPolicy:
    """Save an oversubscription policy (what the webhook decides does not change: it is checked, not applied)."""
    policy.save()
    return policy


@transaction.atomic
def oversubscription_policy_delete(*, policy: OversubscriptionPolicy) -> None:
    """Delete an oversubscription policy (its nodes fall back to their GPU model's ratio, if any)."""
    policy.delete()
