"""injector_site/platform/heavy.py: heavy operator requests run a few at a time per replica and per user; past that
a 429 with Retry-After and a message naming the limit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.contrib.auth.models import Permission

from injector_site.platform.heavy import HeavyBusy, heavy_slot_take


@pytest.fixture(autouse=True)
def slots_dir(settings, tmp_path):
    settings.INJECTOR_HEAVY_SLOTS_DIR = str(tmp_path / "slots")
    settings.INJECTOR_HEAVY_PER_REPLICA = 2
    settings.INJECTOR_HEAVY_PER_USER = 1
    settings.INJECTOR_HEAVY_RETRY_AFTER_SECONDS = 7
    return tmp_path / "slots"


def take(user: str):
    return heavy_slot_take(user_key=user, per_replica=2, per_user=1)


def test_one_user_gets_one_slot_and_the_replica_two():
    first = take("alice")
    with pytest.raises(HeavyBusy, match="INJECTOR_HEAVY_PER_USER") as busy:
        take("alice")
    assert busy.value.retry_after_seconds == 7
    second = take("bob")
    with pytest.raises(HeavyBusy, match="INJECTOR_HEAVY_PER_REPLICA"):
        take("carol")
    first.release()
    take("carol").release()
    second.release()


def test_a_refused_request_holds_no_slot_of_its_user():
    alice, bob = take("alice"), take("bob")
    with pytest.raises(HeavyBusy):
        take("carol")  # the replica is full: carol's own slot is given back
    alice.release()
    take("carol").release()
    bob.release()


def test_the_slots_count_the_other_worker_processes_of_the_replica_and_free_when_one_dies(slots_dir):
    """A slot held by another process of the Pod counts; the kernel frees it when that process ends."""
    hold_both = ("import fcntl, os, sys, time\n"
                 "os.makedirs(sys.argv[1], exist_ok=True)\n"
                 "f = open(os.path.join(sys.argv[1], 'replica-0.lock'), 'a+b'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                 "g = open(os.path.join(sys.argv[1], 'replica-1.lock'), 'a+b'); fcntl.flock(g, fcntl.LOCK_EX)\n"
                 "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold_both, str(slots_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(HeavyBusy, match="INJECTOR_HEAVY_PER_REPLICA"):
            take("alice")
    finally:
        holder.kill()
        holder.wait()
    take("alice").release()


# --- the views: 429, Retry-After and the message ---------------------------------------------------------


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_admissionaudit", "change_preset"]))
    return user


@pytest.fixture
def busy_operator(operator):
    """The operator already runs a heavy request (on another worker of the replica)."""
    slot = heavy_slot_take(user_key=f"user:{operator.pk}", per_replica=2, per_user=1)
    yield operator
    slot.release()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/dashboard/history.csv", "/dashboard/models/Qwen/Qwen2.5-7B-Instruct/",
                                  "/dashboard/rehearsal/?namespace=team-a"])
def test_a_second_heavy_page_of_one_user_is_a_429_with_retry_after(client, busy_operator, path):
    client.force_login(busy_operator)
    response = client.get(path)
    assert response.status_code == 429
    assert response["Retry-After"] == "7"
    assert "heavy request" in response.content.decode() and "INJECTOR_HEAVY_PER_USER" in response.content.decode()


@pytest.mark.django_db
def test_a_second_impact_replay_of_one_user_is_a_429_with_retry_after_and_a_json_detail(busy_operator):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(busy_operator)
    response = api.post("/api/v1/impact/", {"object_type": "preset", "changes": {}}, format="json")
    assert response.status_code == 429 and response["Retry-After"] == "7"
    assert "INJECTOR_HEAVY_PER_USER" in response.json()["detail"]


@pytest.mark.django_db
def test_a_streamed_export_holds_its_slot_until_it_ends(client, operator):
    client.force_login(operator)
    response = client.get("/dashboard/history.csv")
    assert response.status_code == 200
    with pytest.raises(HeavyBusy):  # streaming: the rows are read while the body is sent
        heavy_slot_take(user_key=f"user:{operator.pk}", per_replica=2, per_user=1)
    b"".join(response.streaming_content)
    response.close()
    heavy_slot_take(user_key=f"user:{operator.pk}", per_replica=2, per_user=1).release()


@pytest.mark.django_db
def test_light_pages_take_no_slot(client, busy_operator):
    client.force_login(busy_operator)
    assert client.get("/dashboard/history/").status_code == 200
