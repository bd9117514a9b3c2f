"""POST /api/v1/impact/: what a draft change to a preset, GPU model or policy would do to the admissions of
the last days, before it is saved (mutations.impact replays them; profiles' API serializers or admin forms
validate the draft).

A heavy request (injector_site/platform/heavy.py: a few at a time per replica and per user, 429 past that),
whose replay is killed past INJECTOR_IMPACT_BUDGET_SECONDS (503 naming the budget)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from injector_site.platform.heavy import heavy_request
from injector_site.platform.parsers import StrictJSONParser
from profiles.admin.drafts import draft_from_form
from profiles.api.drafts import draft_from_api
from profiles.catalog import catalog_current
from profiles.services import DRAFTABLE, Draft, DraftError, draft_catalog

from ..impact import ImpactReport, ImpactTimeout, impact_replay
from ..impact.replay import DEFAULT_DAYS, DEFAULT_EXAMPLES, MAX_ADMISSIONS, impact_count, impact_replay_steps
from .views import CanViewAudit


class ImpactRequestSerializer(serializers.Serializer):
    object_type = serializers.ChoiceField(choices=sorted(DRAFTABLE), help_text="preset, gpumodel or namespacepolicy.")
    id = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                  help_text="The object edited or deleted; leave out for a new one.")
    changes = serializers.DictField(required=False, default=dict,
                                    help_text="The fields as PATCH (or, for a new object, POST) would send them.")
    delete = serializers.BooleanField(required=False, default=False)
    days = serializers.IntegerField(required=False, default=DEFAULT_DAYS, min_value=1, max_value=90,
                                    help_text="Replay the admissions of this many days (default 7).")
    limit = serializers.IntegerField(required=False, default=MAX_ADMISSIONS, min_value=1, max_value=MAX_ADMISSIONS,
                                     help_text="At most this many, the most recent (at most 100,000).")
    examples = serializers.IntegerField(required=False, default=DEFAULT_EXAMPLES, min_value=0, max_value=100)


class ImpactView(APIView):
    """Replay recent admissions under a draft configuration: which Pods would get a different grant."""

    permission_classes = [CanViewAudit]  # the examples name Pods, as the audit does
    parser_classes = [StrictJSONParser, FormParser, MultiPartParser]

    @extend_schema(request=ImpactRequestSerializer, responses={200: dict},
                   description="JSON: {object_type, id?, changes, delete?, days?, limit?, examples?}; refused with "
                               "the save's 400 messages. With ?stream=1 the answer is NDJSON: {\"progress\": n, "
                               "\"of\": total} lines, then {\"report\": ...} (or {\"error\": ...}). 429 with "
                               "Retry-After when this user or this replica already runs its heavy requests; 503 "
                               "when the replay runs past its time budget.")
    @heavy_request(api=True)
    def post(self, request, *args, **kwargs):
        try:
            draft, days, limit, examples = self._draft(request)
        except DraftError as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        after = draft_catalog(draft=draft)
        before = catalog_current()
        if request.query_params.get("stream") in ("1", "true"):
            return StreamingHttpResponse(_stream(before, after, draft, days, limit, examples),
                                         content_type="application/x-ndjson")
        try:
            report = impact_replay(before=before, after=after, days=days, limit=limit, examples=examples,
                                   budget_seconds=settings.INJECTOR_IMPACT_BUDGET_SECONDS)
        except ImpactTimeout as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response({"draft": draft.description, **report.as_dict()})

    @staticmethod
    def _draft(request) -> tuple[Draft, int, int, int]:
        if request.content_type.startswith("application/json"):
            form = ImpactRequestSerializer(data=request.data)
            if not form.is_valid():
                raise DraftError({k: [str(m) for m in v] for k, v in form.errors.items()})
            data = form.validated_data
            draft = draft_from_api(object_type=data["object_type"], object_id=data.get("id"), data=data["changes"],
                                   delete=data["delete"])
            return draft, data["days"], data["limit"], data["examples"]
        # The admin's impact panel: its change form's fields, as the ModelForm reads them.
        object_type = request.data.get("_object_type", "")
        object_id = request.data.get("_object_id", "")
        days = request.data.get("_days", "") or str(DEFAULT_DAYS)
        if not days.isdigit() or not 1 <= int(days) <= 90:
            raise DraftError({"_days": [f"{days!r}: give a whole number of days from 1 to 90."]})
        if object_id and not object_id.isdigit():
            raise DraftError({"_object_id": [f"{object_id!r} is not an id."]})
        draft = draft_from_form(object_type=object_type, object_id=int(object_id) if object_id else None,
                                data=request.data)
        return draft, int(days), MAX_ADMISSIONS, DEFAULT_EXAMPLES


def _stream(before, after, draft: Draft, days: int, limit: int, examples: int) -> Iterator[bytes]:
    """NDJSON: how many will be replayed, progress every few thousand rows, then the report (the admin's bar)."""
    total = impact_count(days=days, limit=limit)
    yield orjson.dumps({"progress": 0, "of": total}) + b"\n"
    steps = impact_replay_steps(before=before, after=after, days=days, limit=limit, examples=examples,
                                budget_seconds=settings.INJECTOR_IMPACT_BUDGET_SECONDS)
    try:
        for step in steps:
            if isinstance(step, ImpactReport):
                yield orjson.dumps({"report": {"draft": draft.description, **step.as_dict()}}) + b"\n"
            else:
                yield orjson.dumps({"progress": step, "of": total}) + b"\n"
    except ImpactTimeout as exc:
        yield orjson.dumps({"error": str(exc)}) + b"\n"
