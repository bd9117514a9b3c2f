"""Apply: a recommendation opens the preset's admin form with the size filled in, unsaved, above its impact
preview (profiles.admin's PresetAdmin.get_object reads the query), so the change is replayed before it is saved
and, once saved, recorded in the change log like any other."""

from __future__ import annotations

from django.urls import reverse

from profiles.models import Preset

from ..models import SizeRecommendation


def recommendation_apply_url(*, row: SizeRecommendation, preset_ids: dict[str, int] | None = None) -> str | None:
    """The preset's admin form with the recommended size in it (its impact preview runs before saving)."""
    if row.kind != SizeRecommendation.Kind.PRESET or not row.recommended_mib or row.direction in ("", "keep"):
        return None
    if preset_ids is None:
        preset_ids = dict(Preset.objects.filter(name=row.name).values_list("name", "id"))
    preset_id = preset_ids.get(row.name)
    if preset_id is None:
        return None
    return (f"{reverse('admin:profiles_preset_change', args=[preset_id])}"
            f"?vgpu_memory_mib={row.recommended_mib}&recommendation={row.pk}")
