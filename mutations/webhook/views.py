"""HTTP edges: /mutate (AdmissionReview in and out), /healthz, /readyz, /metrics."""

from __future__ import annotations

import hmac
import logging
import os
from itertools import accumulate

import orjson
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from injector_site.platform.hot_settings import setting_value
from profiles.catalog import catalog_cache, catalog_current
from profiles.inventory.metrics import GpuInventoryCollector

from ..audit.unconverted import UnconvertedScanCollector
from ..engine import admission
from ..metrics import BAD_REQUESTS
from .services import admission_review_handle

logger = logging.getLogger("volcano_injector.admission")


# --- /mutate ---------------------------------------------------------------------------------------
#
# /mutate is on the path of every Pod creation in the cluster, so it is answered by one function on
# bytes, `mutate_answer`, reached two ways: the WSGI application (injector_site/wsgi.py) sends
# `POST /mutate` straight to it, ahead of Django's middleware, signals and DRF; everything else, and
# Django's test client, goes through Django to the `mutate` view below, which calls the same function.
# None of that machinery applies to /mutate: it has no session, CSRF token, user, static file,
# template or content negotiation (the API server is authenticated by TLS: deploy/README.md, mTLS),
# and it counts its own metrics. Skipping it saves a large share of a worker's time per admission
# (measured with scripts/bench and py-spy: docs/benchmarks.md).

MUTATE_PATH = "/mutate"
JSON_HEADERS = (("Content-Type", "application/json"),)
# A Pod, in its AdmissionReview, is nested about 15 levels deep (managedFields included). Deeper
# bodies are refused before anything walks them: recursive code (JSON encoding, comparisons) would
# otherwise hit Python's or orjson's recursion limits, and a 500 says nothing useful.
MAX_NESTING = 100
# A Pod's AdmissionReview holds one JSON object or array per 20 to 80 bytes (the test pods; 21 in a
# 3 MiB review of 49,303 minimal containers). Parsing costs per container, not per byte: a body of
# empty arrays ("[],[],..."), one per 3 bytes, took 3 to 5 times a real body's parse, so denser bodies
# are refused from their bytes, before the parse.
MIN_BYTES_PER_CONTAINER = 8


def mutate_answer(*, content_type: str, content_length: str | None, read, environ: dict) -> tuple[int, bytes]:
    """Answer one POST /mutate: (HTTP status, JSON body). `read(n)` returns up to n bytes of the body;
    `environ` is the request's WSGI environ (Django's request.META).

    The answer is always JSON: an AdmissionReview (200), or {"detail": ...} naming what was wrong
    with the request (400 not an AdmissionReview or not JSON, 403 no client certificate while mTLS
    is configured, 413 too large, 415 not JSON).
    """
    requires_client_cert = setting_value("INJECTOR_MUTATE_REQUIRES_CLIENT_CERT")
    caller_verified = requires_client_cert and client_certificate_presented(environ)
    if requires_client_cert and not caller_verified:
        return _refused(403, "POST /mutate needs a TLS client certificate signed by a CA in TLS_CLIENT_CA_FILE "
                             "(mTLS is on); this connection presented none. Give the API server one in its "
                             "admission configuration (deploy/README.md, mTLS)")
    limit = setting_value("INJECTOR_MAX_BODY_BYTES")
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type != "application/json":
        return _refused(415, f"Content-Type must be application/json (an AdmissionReview), got {content_type!r}")
    too_large = f"request body is larger than {limit} bytes (the API server sends at most 3 MiB)"
    if content_length and content_length.isdigit() and int(content_length) > limit:
        return _refused(413, too_large)
    raw = read(limit + 1)
    if len(raw) > limit:  # no Content-Length (chunked), or one that understated the body
        return _refused(413, too_large)
    problem = _body_bytes_problem(raw)
    if problem:
        return _refused(400, problem)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _refused(400, f"request body is not valid JSON: {exc}")
    try:
        answer = admission_review_handle(body=body, caller_verified=caller_verified)
    except admission.BadReview as exc:
        return _refused(400, f"not an AdmissionReview: {exc}")
    return 200, orjson.dumps(answer)


def client_certificate_presented(environ: dict) -> bool:
    """Whether the request came on a TLS connection whose client presented a certificate.

    gunicorn puts the connection's socket in the environ. With TLS_CLIENT_CA_FILE set it asks every
    client for a certificate and ends the handshake when one does not verify against those CAs
    (injector_site/gunicorn_conf.py), so a certificate present here is a verified one. Anything else
    (plain HTTP, no socket: Django's test client, runserver) counts as none.
    """
    getpeercert = getattr(environ.get("gunicorn.socket"), "getpeercert", None)
    if getpeercert is None:
        return False
    try:
        return bool(getpeercert(binary_form=True))
    except (ValueError, OSError):  # not connected, or no handshake
        return False


# Every byte that is not a bracket is deleted; brackets become steps of +1 (opening) and -1 (closing).
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def _body_bytes_problem(raw: bytes) -> str | None:
    """Why these bytes cannot be an AdmissionReview worth parsing (None: parse them), from one scan of them.

    The top level must be an object; beyond MAX_NESTING brackets, the objects and arrays must be nested at
    most MAX_NESTING deep and be no denser than one per MIN_BYTES_PER_CONTAINER bytes. The scan runs in
    C (bytes methods), so its cost follows the body's size: a body of a million empty arrays costs no
    more than a real body of its size, and nothing walks a parsed tree to find its depth.
    """
    if raw.lstrip(b" \t\r\n")[:1] != b"{":
        return "not an AdmissionReview: the body must be a JSON object (an AdmissionReview)"
    if raw.count(b"{") + raw.count(b"[") <= MAX_NESTING:  # nesting needs brackets: most bodies stop here
        return None
    # Outside strings only: drop escaped backslashes, then escaped quotes; what is left between quotes
    # is string content (every other piece of the split). Invalid JSON may be misread: it is refused anyway.
    outside_strings = b"".join(raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    steps = outside_strings.translate(_BRACKET_STEPS, _NOT_BRACKETS)
    if max(accumulate(memoryview(steps).cast("b"))) > MAX_NESTING:
        return (f"request body is nested deeper than {MAX_NESTING} levels of objects and arrays; "
                "an AdmissionReview for a Pod is not")
    containers = steps.count(1)
    if containers * MIN_BYTES_PER_CONTAINER > len(raw):
        return (f"not an AdmissionReview: the body has {containers} JSON objects and arrays in {len(raw)} bytes, "
                f"more than one per {MIN_BYTES_PER_CONTAINER} bytes (a Pod's review has one per 20 to 80)")
    return None


def _refused(status_code: int, detail: str) -> tuple[int, bytes]:
    BAD_REQUESTS.inc()
    logger.warning("refused a /mutate request", extra={"status_code": status_code, "detail": detail[:500]})
    return status_code, orjson.dumps({"detail": detail})


@csrf_exempt
def mutate(request):
    """POST an AdmissionReview (admission.k8s.io/v1); Django's route to `mutate_answer`."""
    if request.method != "POST":
        status_code, body = _refused(405, f"method {request.method} is not allowed on /mutate: POST an AdmissionReview")
        response = HttpResponse(body, status=status_code, content_type="application/json")
        response["Allow"] = "POST"
        return response
    status_code, body = mutate_answer(content_type=request.META.get("CONTENT_TYPE", ""),
                                      content_length=request.META.get("CONTENT_LENGTH"), read=request.read,
                                      environ=request.META)
    return HttpResponse(body, status=status_code, content_type="application/json")


@require_GET
def healthz(request):
    """Liveness: the process answers. No database: a slow database must not restart the webhook."""
    return HttpResponse("ok\n", content_type="text/plain")


@require_GET
def readyz(request):
    """Readiness: configuration is loaded (from the database, or kept from the last good read).

    It stays green while PostgreSQL is down on purpose: with failurePolicy Fail an unready webhook
    would stop every Pod creation in the cluster, while this one keeps answering from its cache.
    """
    catalog = catalog_current()
    # Anyone who reaches the webhook port reads this: the error itself (host, port, role) is in the log.
    return JsonResponse({
        "status": "ok",
        "config_version": catalog.version,
        "config_error": "database unavailable" if catalog_cache.last_error else None,
    })


# The last scan for unconverted GPU Pods, read from the database (written by a CronJob, not by these
# processes): its own registry, exported after the process metrics.
unconverted_scan_metrics = UnconvertedScanCollector()
# The GPU inventory's last sync (written by its CronJob), likewise.
gpu_inventory_metrics = GpuInventoryCollector()
_database_metrics = CollectorRegistry()
_database_metrics.register(unconverted_scan_metrics)
_database_metrics.register(gpu_inventory_metrics)


@require_GET
def metrics(request):
    """Prometheus metrics; with METRICS_TOKEN set, only for `Authorization: Bearer <token>`."""
    token = settings.METRICS_TOKEN
    if token:
        given = request.META.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return HttpResponse("metrics need Authorization: Bearer <METRICS_TOKEN>\n", status=401,
                                content_type="text/plain")
    # gunicorn's workers write their metrics to files in PROMETHEUS_MULTIPROC_DIR (as django-prometheus'
    # ExportToDjangoView reads them); without it (runserver, tests) this process's registry is the whole story.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    body = generate_latest(registry) + generate_latest(_database_metrics)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
