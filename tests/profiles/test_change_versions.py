"""The configuration version is the id of the last committed change, in commit order, across concurrent writers."""

import threading
import time

import pytest
from django.db import connections, transaction

from profiles.models import ConfigVersion, ObjectChange, Preset

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_a_second_writer_waits_for_the_first_and_gets_the_later_version():
    first_saved, second_done = threading.Event(), threading.Event()
    ids: dict[str, int] = {}

    def second() -> None:
        try:
            first_saved.wait(10)
            with transaction.atomic():
                preset = Preset.objects.get(name="llm-14b")
                preset.vgpu_cores_percent = 20
                preset.save()  # waits for the first writer's lock on the version row
            ids["second"] = ObjectChange.objects.filter(object_repr="llm-14b").latest("id").pk
        finally:
            connections.close_all()
            second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with transaction.atomic():
        preset = Preset.objects.get(name="llm-7b")
        preset.vgpu_cores_percent = 10
        preset.save()
        ids["first"] = ObjectChange.objects.filter(object_repr="llm-7b").latest("id").pk
        first_saved.set()
        time.sleep(0.5)
        assert not second_done.is_set(), "the second writer must wait for this transaction"
    thread.join(10)
    assert ids["second"] > ids["first"]
    assert ConfigVersion.objects.get(pk=1).version == ids["second"]
