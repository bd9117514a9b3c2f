"""The configuration version is the id of the last committed change, in commit order, across concurrent writers."""

import threading
import time

import pytest
from django.db import connections, transaction

from profiles.models import ConfigVersion, ObjectChange, Preset

# Two real transactions, so no test transaction around them. Without serialized_rollback (it would collide with
# the content types a flushing test before it re-created): the test makes the presets it edits.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_writer_waits_for_the_first_and_gets_the_later_version():
    Preset.objects.create(name="writer-a", vgpu_memory_mib=1024)
    Preset.objects.create(name="writer-b", vgpu_memory_mib=2048)
    first_saved, second_done = threading.Event(), threading.Event()
    ids: dict[str, int] = {}

    def second() -> None:
        try:
            first_saved.wait(10)
            with transaction.atomic():
                preset = Preset.objects.get(name="writer-b")
                preset.vgpu_cores_percent = 20
                preset.save()  # waits for the first writer's lock on the version row
            ids["second"] = ObjectChange.objects.filter(object_repr="writer-b").latest("id").pk
        finally:
            connections.close_all()
            second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with transaction.atomic():
        preset = Preset.objects.get(name="writer-a")
        preset.vgpu_cores_percent = 10
        preset.save()
        ids["first"] = ObjectChange.objects.filter(object_repr="writer-a").latest("id").pk
        first_saved.set()
        time.sleep(0.5)
        assert not second_done.is_set(), "the second writer must wait for this transaction"
    thread.join(10)
    assert ids["second"] > ids["first"]
    assert ConfigVersion.objects.get(pk=1).version == ids["second"]
