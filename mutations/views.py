"""HTTP edges: /mutate (AdmissionReview in and out), /healthz, /readyz, /metrics."""

from __future__ import annotations

import hmac
import json

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from django_prometheus.exports import ExportToDjangoView
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from profiles.selectors import catalog_cache, catalog_current

from . import admission
from .metrics import BAD_REQUESTS
from .services import admission_review_handle


class BoundedJSONParser(JSONParser):
    """JSON only, and no more than INJECTOR_MAX_BODY_BYTES, even without a Content-Length."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.INJECTOR_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise ParseError(f"request body is larger than {limit} bytes (the API server sends at most 3 MiB)")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"request body is not valid JSON: {exc}") from exc


@extend_schema(exclude=True)  # the Kubernetes AdmissionReview API, not part of the operators' REST API
class MutateView(APIView):
    """POST an AdmissionReview (admission.k8s.io/v1); the answer is always an AdmissionReview."""

    authentication_classes: list = []  # the API server authenticates by TLS; see deploy/README.md (mTLS)
    permission_classes = [AllowAny]
    parser_classes = [BoundedJSONParser]

    def post(self, request, *args, **kwargs):
        # A Content-Length over the cap was answered 413 by BodySizeLimitMiddleware already; a chunked
        # body is bounded by BoundedJSONParser.
        try:
            answer = admission_review_handle(body=request.data)
        except admission.BadReview as exc:
            BAD_REQUESTS.inc()
            return Response({"detail": f"not an AdmissionReview: {exc}"}, status=status.HTTP_400_BAD_REQUEST)
        return Response(answer)

    def handle_exception(self, exc):
        # Parse errors, wrong content types: a 4xx that says what was wrong.
        BAD_REQUESTS.inc()
        return super().handle_exception(exc)


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
    return JsonResponse({
        "status": "ok",
        "config_version": catalog.version,
        "config_error": catalog_cache.last_error,
    })


_export = ExportToDjangoView


@require_GET
def metrics(request):
    """Prometheus metrics; with METRICS_TOKEN set, only for `Authorization: Bearer <token>`."""
    token = settings.METRICS_TOKEN
    if token:
        given = request.META.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return HttpResponse("metrics need Authorization: Bearer <METRICS_TOKEN>\n", status=401,
                                content_type="text/plain")
    return _export(request)
