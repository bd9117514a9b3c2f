"""The right-sizing page: each preset, catalog model and policy default, its recommended size and the evidence."""

from __future__ import annotations

from django.shortcuts import render
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from profiles.models import Preset

from ..models import SizeRecommendation
from ..rightsizing.apply import recommendation_apply_url
from .views import audit_viewer_required, page_context

CHART_WIDTH, CHART_HEIGHT = 240, 40


def sparkline(points: list[list[float]], *, ceiling: float | None = None) -> SafeString:
    """An SVG line of the hourly peaks (the evidence), scaled to the larger of its peak and `ceiling` (the grant)."""
    if len(points) < 2:
        return SafeString("")
    top = max([value for _, value in points] + [ceiling or 0]) or 1
    first, last = points[0][0], points[-1][0]
    span = (last - first) or 1
    coords = " ".join(f"{(at - first) / span * CHART_WIDTH:.1f},{CHART_HEIGHT - value / top * CHART_HEIGHT:.1f}"
                      for at, value in points)
    grant = ""
    if ceiling:
        y = CHART_HEIGHT - ceiling / top * CHART_HEIGHT
        grant = format_html('<line class="grant" x1="0" x2="{}" y1="{}" y2="{}"/>', CHART_WIDTH, f"{y:.1f}",
                            f"{y:.1f}")
    return format_html('<svg class="sparkline" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
                       'aria-label="hourly peak over the window">{}<polyline points="{}"/></svg>',
                       CHART_WIDTH, CHART_HEIGHT, CHART_WIDTH, CHART_HEIGHT, grant, coords)


@require_GET
@audit_viewer_required  # the evidence names namespaces and Pods, as the audit does
def recommendations(request):
    kind = request.GET.get("kind", "")
    rows = SizeRecommendation.objects.all()
    if kind in SizeRecommendation.Kind.values:
        rows = rows.filter(kind=kind)
    preset_ids = dict(Preset.objects.values_list("name", "id"))
    shown = []
    for row in rows:
        evidence = row.evidence or {}
        if evidence.get("memory_chart_mib"):
            chart = sparkline(evidence["memory_chart_mib"], ceiling=row.current_mib)
        else:
            chart = sparkline([[at, value * 100] for at, value in evidence.get("kv_chart", [])], ceiling=100)
        shown.append({"row": row, "evidence": evidence, "chart": chart,
                      "apply_url": recommendation_apply_url(row=row, preset_ids=preset_ids)})
    unavailable = next((r.message for r in rows if r.state == SizeRecommendation.State.PROMETHEUS_UNAVAILABLE), "")
    return render(request, "dashboard/recommendations.html", page_context(
        request, recommendations=shown, kind=kind, kinds=SizeRecommendation.Kind.choices, unavailable=unavailable))
