"""Malformed bodies at /mutate and the REST API: never a 5xx, never a hang, always a word on what was wrong.

The bodies are generated from realistic ones with a fixed seed (reproducible): truncated JSON, a
wrong type at every position of the document, huge strings, deep nesting, bodies over the size
cap, invalid UTF-8 and wrong content types. FUZZ_BODIES scales the count (10,000 by default:
7,000 for /mutate, 3,000 for the API).
"""

from __future__ import annotations

import copy
import json
import os
import random
import time

import pytest
from django.contrib.auth import get_user_model

from mutations.audit import audit_flush
from mutations.models import AdmissionAudit
from tests.support import pods
from tests.support.wsgi import wsgi_call

pytestmark = pytest.mark.django_db

TOTAL_BODIES = int(os.environ.get("FUZZ_BODIES", "10000"))
MUTATE_BODIES = TOTAL_BODIES * 7 // 10
API_BODIES = TOTAL_BODIES - MUTATE_BODIES
# An answer slower than the webhook's timeoutSeconds (deploy/) counts as a hang.
HANG_SECONDS = 5.0
SIZE_CAP_BYTES = 64 * 1024

WRONG_VALUES = [None, True, False, 0, -1, 2**63, 1.5, float("1e308"), "", "x", "\u0000", "é" * 3, [], [None], {},
                {"": None}, "9" * 400]
CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
                 "application/xml", "application/json; charset=utf-16"]


def paths(document, prefix=()):
    """Every position in a JSON document (dict keys and list indexes), the root included."""
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from paths(value, prefix + (index,))


def replaced(document, path, value):
    if not path:
        return value
    document = copy.deepcopy(document)
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return document


def deep(depth: int, rng: random.Random) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * depth + "1" + closer * depth


def malformed_bodies(valid_documents: list, count: int, rng: random.Random):
    """(body bytes, content type, what kind of damage) tuples."""
    all_paths = [(doc, list(paths(doc))) for doc in valid_documents]
    kinds = ["truncated", "wrong-type", "wrong-type", "wrong-type", "huge-string", "deep", "deep-inside",
             "over-cap", "bad-utf8", "content-type", "not-an-object", "removed-key"]
    for _ in range(count):
        kind = rng.choice(kinds)
        doc, doc_paths = rng.choice(all_paths)
        text = json.dumps(doc)
        content_type = "application/json"
        if kind == "truncated":
            body = text[: rng.randrange(0, len(text))].encode()
        elif kind == "wrong-type":
            body = json.dumps(replaced(doc, rng.choice(doc_paths), rng.choice(WRONG_VALUES))).encode()
        elif kind == "huge-string":
            body = json.dumps(replaced(doc, rng.choice(doc_paths), "A" * rng.choice([10_000, 60_000]))).encode()
        elif kind == "deep":
            body = deep(rng.choice([100, 1_000, 5_000, 20_000]), rng).encode()
        elif kind == "deep-inside":
            nested = json.loads(deep(rng.choice([50, 400, 900]), rng))
            body = json.dumps(replaced(doc, rng.choice(doc_paths[1:]), nested)).encode()
        elif kind == "over-cap":
            body = json.dumps(replaced(doc, rng.choice(doc_paths[1:]), "B" * (SIZE_CAP_BYTES + 10))).encode()
        elif kind == "bad-utf8":
            raw = text.encode()
            cut = rng.randrange(0, len(raw))
            body = raw[:cut] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"]) + raw[cut:]
        elif kind == "content-type":
            body, content_type = text.encode(), rng.choice(CONTENT_TYPES)
        elif kind == "not-an-object":
            body = rng.choice([b"null", b"1", b'"x"', b"[]", b"[{}]", b"true", b"NaN", b"-Infinity", b"", b" "])
        else:  # removed-key
            path = rng.choice(doc_paths[1:])
            body = json.dumps(replaced(doc, path, None) if isinstance(path[-1], int) else _without(doc, path))
            body = body.encode()
        yield body, content_type, kind


def _without(document, path):
    document = copy.deepcopy(document)
    target = document
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return document


def says_what_was_wrong(payload) -> bool:
    """A 4xx body names the problem: DRF's detail, or field errors with messages."""
    if isinstance(payload, dict) and payload:
        return all(says_what_was_wrong(v) if not isinstance(v, str) else bool(v.strip()) for v in payload.values())
    if isinstance(payload, list) and payload:
        return all(says_what_was_wrong(v) if not isinstance(v, str) else bool(v.strip()) for v in payload)
    return isinstance(payload, str) and bool(payload.strip())


def test_malformed_admission_reviews_get_a_4xx_or_a_valid_answer_and_never_a_5xx(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.INJECTOR_MAX_BODY_BYTES = SIZE_CAP_BYTES  # one setting
    rng = random.Random(20261202)
    valid = [pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})),
             pods.review(pods.kserve_predictor_pod()), pods.review(pods.init_gpu_pod()),
             pods.review(pods.ray_worker_pod())]
    seen = {"4xx": 0, "200": 0}
    slowest = 0.0
    for body, content_type, kind in malformed_bodies(valid, MUTATE_BODIES, rng):
        started = time.monotonic()
        # Through the WSGI application gunicorn serves: its POST /mutate route is the production one.
        response = wsgi_call("POST", "/mutate", body, content_type=content_type)
        slowest = max(slowest, time.monotonic() - started)
        assert response.status_code < 500, (kind, body[:300], response.content[:300])
        payload = response.json()
        if response.status_code == 200:
            seen["200"] += 1
            answer = payload["response"]
            assert payload["apiVersion"] == "admission.k8s.io/v1" and payload["kind"] == "AdmissionReview"
            assert answer["uid"] == json.loads(body)["request"]["uid"]
            assert ("patch" in answer) == ("patchType" in answer)
            if not answer["allowed"]:
                assert answer["status"]["message"].strip(), (kind, body[:300])
        else:
            seen["4xx"] += 1
            assert 400 <= response.status_code < 500
            assert says_what_was_wrong(payload.get("detail")), (kind, body[:300], payload)
    assert slowest < HANG_SECONDS, f"slowest answer {slowest:.2f}s"
    assert seen["4xx"] > MUTATE_BODIES / 10 and seen["200"] > MUTATE_BODIES / 10, seen
    audit_flush(timeout_seconds=60)
    crashed = list(AdmissionAudit.objects.filter(decision="error").values_list("reason", flat=True)[:5])
    assert not crashed, f"malformed Pods should be denied with a reason, not crash the engine: {crashed}"


@pytest.fixture
def operator_client(client):
    user = get_user_model().objects.create_superuser("fuzz-operator", "fuzz@example.com", "x" * 20)
    client.force_login(user)
    return client


def test_malformed_api_bodies_get_a_4xx_that_says_what_was_wrong_and_never_a_5xx(operator_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SIZE_CAP_BYTES
    rng = random.Random(20261203)
    endpoints = {
        "/api/v1/presets/": [{"name": "fuzz-a", "vgpu_memory_mib": 16384, "vgpu_cores_percent": 50,
                              "min_model_size_b": "1", "max_model_size_b": "7", "gpu_model": None,
                              "cpu_request": "1", "cpu_limit": "2", "memory_request": "1Gi",
                              "memory_limit": "2Gi", "enabled": True, "is_default": False}],
        "/api/v1/gpu-models/": [{"name": "fuzz-card", "memory_mib": 81920, "match": "A100"}],
        "/api/v1/namespace-policies/": [{"namespace": "fuzz-*", "mode": "enforce", "default_preset": "default",
                                         "allowed_presets": ["default"], "max_vgpus_per_pod": 2,
                                         "max_vgpu_memory_mib": 40000, "scheduler_name": "volcano",
                                         "scheduler_scope": "gpu-pods", "deny_privileged": True}],
        "/api/v1/preview/": [{"namespace": "team-a", "pod": pods.vllm_deployment_pod()}],
    }
    slowest = 0.0
    answered = 0
    per_endpoint = API_BODIES // len(endpoints)
    for url, valid in endpoints.items():
        for body, content_type, kind in malformed_bodies(valid, per_endpoint, rng):
            started = time.monotonic()
            response = operator_client.generic("POST", url, body, content_type=content_type)
            slowest = max(slowest, time.monotonic() - started)
            answered += 1
            assert response.status_code < 500, (url, kind, body[:300], response.content[:300])
            if response.status_code >= 400:
                assert says_what_was_wrong(response.json()), (url, kind, body[:300], response.content[:300])
    assert answered >= API_BODIES - len(endpoints)
    assert slowest < HANG_SECONDS, f"slowest answer {slowest:.2f}s"
