"""What the configuration's migrations left, as the squashed migration makes it (profiles 0001_squashed_0007).

The seeded rows themselves (GPU models, presets, the `*` policy, the language-model catalog, version 1) are
compared with the old chain's in tests/test_migrations_squashed.py. The old chain's 0004, which hashed DRF's
plaintext tokens into ApiToken digests, has no subject here: every database reaching this release ran it with
the previous one, and a new database has no plaintext token.
"""

import pytest

from profiles.models import ConfigVersion, ObjectChange, Preset


@pytest.mark.django_db
def test_the_first_change_after_the_seeded_configuration_raises_the_version():
    """0007: the change log's ids, which become the version, start above the seeded version; 0011: the seeded
    configuration is version 0, so no change can share its number."""
    assert ConfigVersion.objects.get(pk=1).version == 0
    before = ConfigVersion.objects.get(pk=1).version
    preset = Preset.objects.get(name="llm-7b")
    preset.vgpu_cores_percent = 30
    preset.save()
    change = ObjectChange.objects.latest("id")
    assert change.pk > before and ConfigVersion.objects.get(pk=1).version == change.pk


@pytest.mark.django_db
def test_presets_split_over_several_gpus_say_so():
    """0005: the presets sized for 2 and 4 GPUs (0002) record it."""
    assert dict(Preset.objects.filter(name__in=["llm-7b", "llm-32b", "llm-70b"]).values_list(
        "name", "model_size_gpus")) == {"llm-7b": 1, "llm-32b": 2, "llm-70b": 4}
