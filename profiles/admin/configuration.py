"""Django admin for GPU models, presets and namespace policies, and the Pod preview page (staff only)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.exceptions import NotRegistered
from django.core.exceptions import PermissionDenied
from django.db.models import ProtectedError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import urlencode

from injector_site.platform.admin_permissions import ViewOnlyAdminMixin
from mutations.engine import is_namespace_pattern, mib_text
from mutations.models import SizeRecommendation
from mutations.rightsizing.apply import recommendation_reason
from mutations.webhook.decide import pod_preview, preview_answer

from ..catalog import namespace_policy_inherited
from ..models import ApiToken, GpuModel, NamespacePolicy, NamespaceQuota, Preset
from ..oversubscription import oversubscription_report
from ..selectors import (
    gpu_model_list,
    namespace_policy_list,
    pod_yaml,
    pod_yaml_diff,
    preset_list,
    preset_users,
)
from ..services import (
    ConfigurationInUse,
    gpu_model_delete,
    gpu_model_save,
    namespace_policy_delete,
    namespace_policy_save,
    preset_delete,
    preset_save,
)
from .changes import ChangeHistoryMixin
from .forms import GpuModelForm, NamespacePolicyForm, PodPreviewForm, PresetForm
from .links import audit_links
from .ratio_checks import check_column, check_html


def _mib(value: int | None) -> str:
    return "-" if value is None else mib_text(value)


if TYPE_CHECKING:
    from typing import TypedDict

    from django_stubs_ext import WithAnnotations

    _ModelAdmin = admin.ModelAdmin[Any]  # what the mixin below is mixed into

    class _PresetsCount(TypedDict):  # what gpu_model_list() annotates
        presets_count: int

    class _PolicyCounts(TypedDict):  # what preset_list() annotates
        default_for_policies_count: int
        allowed_in_policies_count: int
else:
    _ModelAdmin = object


class RefusingDeleteMixin(_ModelAdmin):
    """Deletes go through a service that refuses rows still in use; the admin shows why instead of a 500."""

    def remove(self, obj: Any) -> None:
        raise NotImplementedError  # each admin deletes through its service

    def delete_model(self, request, obj):
        self.remove(obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.remove(obj)

    def in_use_messages(self, obj) -> list[str]:
        return []

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # Shown on the confirmation page as "would require deleting the following protected objects".
        extra = [message for obj in objs for message in self.in_use_messages(obj)]
        return deleted, counts, perms_needed, list(protected) + extra

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except (ConfigurationInUse, ProtectedError) as exc:
            self.message_user(request, getattr(exc, "message", str(exc)), messages.ERROR)
            return HttpResponseRedirect(request.path)


@admin.register(GpuModel)
class GpuModelAdmin(ChangeHistoryMixin, RefusingDeleteMixin, admin.ModelAdmin):
    form = GpuModelForm
    change_form_template = "admin/profiles/change_form_impact.html"
    list_display = ["name", "memory", "match", "in_cluster", "presets_count", "oversubscription_ratio"]
    list_filter = ["in_cluster", "discovered"]
    search_fields = ["name", "match", "description"]
    ordering = ["name"]
    # Kept in step with the cluster by sync_gpu_inventory, not typed in.
    readonly_fields = ["in_cluster", "discovered", "physical_memory_mib", "oversubscription_check", "created_at",
                       "updated_at"]

    def get_queryset(self, request):
        return gpu_model_list()

    def get_list_display(self, request):
        return [*super().get_list_display(request), check_column(lambda report, obj: report.gpu_model(obj.name))]

    @admin.display(description="oversubscription check (its nodes in the inventory)")
    def oversubscription_check(self, obj: GpuModel) -> str:
        return check_html(oversubscription_report().gpu_model(obj.name), full=True) if obj.pk else "-"

    @admin.display(description="memory", ordering="memory_mib")
    def memory(self, obj: GpuModel) -> str:
        return _mib(obj.memory_mib)

    @admin.display(description="used by presets", ordering="presets_count")
    def presets_count(self, obj: WithAnnotations[GpuModel, _PresetsCount]) -> int:
        return obj.presets_count

    def save_model(self, request, obj, form, change):
        gpu_model_save(gpu_model=obj)

    def remove(self, obj: GpuModel) -> None:
        gpu_model_delete(gpu_model=obj)

    def in_use_messages(self, obj: GpuModel) -> list[str]:
        return [f"preset {name} (pinned to this GPU model)" for name in obj.presets.values_list("name", flat=True)]


def _applied_recommendation(request, preset: Preset) -> SizeRecommendation | None:
    """The recommendation an Apply link names (?recommendation=id), if it is this preset's."""
    pk = request.GET.get("recommendation", "")
    if not pk.isdigit():
        return None
    return SizeRecommendation.objects.filter(pk=int(pk), kind=SizeRecommendation.Kind.PRESET, name=preset.name).first()


@admin.register(Preset)
class PresetAdmin(ChangeHistoryMixin, RefusingDeleteMixin, admin.ModelAdmin):
    form = PresetForm
    change_form_template = "admin/profiles/change_form_impact.html"
    list_display = ["name", "memory", "vgpu_cores_percent", "model_size_range", "gpu_model", "enabled",
                    "is_default", "default_for_policies_count", "allowed_in_policies_count"]
    list_display_links = ["name"]
    list_filter = ["enabled", "is_default", "gpu_model"]
    search_fields = ["name", "description"]
    ordering = ["vgpu_memory_mib", "name"]
    readonly_fields = ["created_at", "updated_at", "audit"]
    fieldsets = [
        (None, {"fields": ["name", "description", "enabled", "is_default", "audit"]}),
        ("vGPU", {"fields": ["vgpu_memory_mib", "vgpu_cores_percent", "gpu_model"]}),
        ("Model sizes served (billions of parameters)", {"fields": ["min_model_size_b", "max_model_size_b",
                                                                    "model_size_gpus", "kv_cache_sequences"],
                                                         "description": "From (exclusive) to (inclusive): "
                                                         "a 7B model gets the preset whose range holds 7."}),
        ("CPU and memory (override the namespace policy's defaults)",
         {"fields": ["cpu_request", "cpu_limit", "memory_request", "memory_limit"]}),
        ("Scheduling", {"fields": ["priority_class"]}),
        ("History", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]

    def get_queryset(self, request):
        return preset_list()

    @admin.display(description="audit")
    def audit(self, obj: Preset) -> str:
        return audit_links("preset", obj.name)

    @admin.display(description="vGPU memory", ordering="vgpu_memory_mib")
    def memory(self, obj: Preset) -> str:
        return _mib(obj.vgpu_memory_mib)

    @admin.display(description="model sizes", ordering="max_model_size_b")
    def model_size_range(self, obj: Preset) -> str:
        if obj.min_model_size_b is None and obj.max_model_size_b is None:
            return "-"
        low = f"{obj.min_model_size_b.normalize():f}B" if obj.min_model_size_b is not None else "0"
        high = f"{obj.max_model_size_b.normalize():f}B" if obj.max_model_size_b is not None else "any"
        return f"over {low} up to {high}"

    @admin.display(description="default in policies", ordering="default_for_policies_count")
    def default_for_policies_count(self, obj: WithAnnotations[Preset, _PolicyCounts]) -> int:
        return obj.default_for_policies_count

    @admin.display(description="allowed in policies", ordering="allowed_in_policies_count")
    def allowed_in_policies_count(self, obj: WithAnnotations[Preset, _PolicyCounts]) -> int:
        return obj.allowed_in_policies_count

    def get_object(self, request, object_id, from_field=None):
        """On a GET from a right-sizing recommendation's Apply (?vgpu_memory_mib=N&recommendation=id): the form
        shows the recommended size, unsaved, so the impact preview replays it before anyone saves (the stored
        recommendation's size when it is this preset's, else the query's)."""
        obj = super().get_object(request, object_id, from_field)
        size = request.GET.get("vgpu_memory_mib", "")
        if obj is None or request.method != "GET" or not (size.isdigit() and int(size) > 0):
            return obj
        row = _applied_recommendation(request, obj)
        recommended = row.recommended_mib if row is not None and row.recommended_mib else int(size)
        which = (f"recommendation {row.pk}" if row is not None
                 else f"the link (recommendation {request.GET.get('recommendation', '')!s} is not this preset's)")
        messages.info(request, f"Filled in from {which}: vGPU memory {obj.vgpu_memory_mib:,} MiB now, "
                               f"{recommended:,} MiB recommended. Show the impact below, then save (or leave without "
                               "saving); the Reason says what the recommendation was.")
        obj.vgpu_memory_mib = recommended
        return obj

    def change_reason_initial(self, request, obj) -> str:
        row = _applied_recommendation(request, obj) if obj is not None else None
        return recommendation_reason(row=row) if row is not None else ""

    def save_model(self, request, obj, form, change):
        preset_save(preset=obj)

    def remove(self, obj: Preset) -> None:
        preset_delete(preset=obj)

    def in_use_messages(self, obj: Preset) -> list[str]:
        found = [f"namespace policy {name} (uses this preset)" for name in preset_users(preset=obj)]
        if obj.is_default:
            found.append("the default preset role: make another preset the default first")
        return found


@admin.register(NamespacePolicy)
class NamespacePolicyAdmin(ChangeHistoryMixin, RefusingDeleteMixin, admin.ModelAdmin):
    form = NamespacePolicyForm
    list_display = ["namespace", "kind", "mode", "default_preset", "allowed", "max_vgpus_per_pod", "max_memory",
                    "scheduler_name", "scheduler_scope", "queues", "priority_class", "budget", "deny_privileged"]
    list_filter = ["mode", "scheduler_scope", "deny_privileged", "unknown_model", "default_preset"]
    search_fields = ["namespace", "description"]
    ordering = ["namespace"]
    filter_horizontal = ["allowed_presets"]
    readonly_fields = ["created_at", "updated_at", "audit", "inherited", "right_sized_mib", "right_sized_at"]
    actions = ["preview_pod_action"]
    change_list_template = "admin/profiles/namespacepolicy/change_list.html"
    change_form_template = "admin/profiles/change_form_impact.html"
    fieldsets = [
        (None, {"fields": ["namespace", "description", "mode", "audit"]}),
        ("Presets", {"fields": ["default_preset", "allowed_presets"]}),
        ("Limits", {"fields": ["max_vgpus_per_pod", "max_vgpu_memory_mib", "deny_privileged",
                               "allow_oversubscribed_serving"]}),
        ("Scheduler", {"fields": ["scheduler_name", "scheduler_scope"]}),
        ("Sizing from the serving command", {
            "fields": ["infer_from_serving", "kv_cache_sequences", "unknown_model"],
            "description": "GPU Pods that name no size are sized from their inference server's command line and the "
                           "model catalog (docs/sizing.md).",
        }),
        ("Right-sizing", {
            "fields": ["right_sizing", "right_sized_mib", "right_sized_at"],
            "description": "From the Pods' observed use (README, \"Right-sizing\"); apply is bounded and new Pods "
                           "only, and each Pod it sizes says so in its warning and audit row.",
        }),
        ("Volcano queue and priority", {
            "fields": ["default_queue", "allowed_queues", "priority_class"],
            "description": "Set on the Pods this policy reaches when they name none; never in place of what a Pod "
                           "names. The queues and the PriorityClass must exist in the cluster.",
        }),
        ("Namespace budget (a ResourceQuota kept by manage.py sync_quotas)", {
            "fields": ["budget_vgpu_memory_gib", "budget_vgpu_number"],
            "description": "Kubernetes enforces it in every namespace this policy covers. The memory budget counts "
                           "volcano.sh/vgpu-memory once per container: a container with 2 vGPUs of 16 GiB counts "
                           "16 GiB (see the README).",
        }),
        ("CPU and memory defaults for GPU containers",
         {"fields": ["cpu_request", "cpu_limit", "memory_request", "memory_limit", "inherited"],
          "description": "A blank field takes the global policy's (*) value; none sets no default."}),
        ("History", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]

    def get_queryset(self, request):
        return namespace_policy_list()

    @admin.display(description="inherited from the global policy (*)")
    def inherited(self, obj: NamespacePolicy) -> str:
        values = namespace_policy_inherited(policy=obj)
        return ", ".join(f"{name} {value}" for name, value in values.items()) or "nothing"

    @admin.display(description="audit")
    def audit(self, obj: NamespacePolicy) -> str:
        return audit_links("policy", obj.namespace)

    @admin.display(description="kind")
    def kind(self, obj: NamespacePolicy) -> str:
        return "pattern" if is_namespace_pattern(obj.namespace) else "exact"

    @admin.display(description="allowed presets", ordering="allowed_presets_count")
    def allowed(self, obj: NamespacePolicy) -> str:
        names = [p.name for p in obj.allowed_presets.all()]  # prefetched by namespace_policy_list
        return ", ".join(names) if names else "all enabled"

    @admin.display(description="max vGPU memory", ordering="max_vgpu_memory_mib")
    def max_memory(self, obj: NamespacePolicy) -> str:
        return _mib(obj.max_vgpu_memory_mib)

    @admin.display(description="queue (allowed)", ordering="default_queue")
    def queues(self, obj: NamespacePolicy) -> str:
        allowed = ", ".join(obj.allowed_queues or [])
        return f"{obj.default_queue or '-'}" + (f" ({allowed})" if allowed else "")

    @admin.display(description="budget")
    def budget(self, obj: NamespacePolicy) -> str:
        parts = []
        if obj.budget_vgpu_memory_gib is not None:
            parts.append(f"{obj.budget_vgpu_memory_gib} GiB")
        if obj.budget_vgpu_number is not None:
            parts.append(f"{obj.budget_vgpu_number} vGPUs")
        return ", ".join(parts) or "-"

    def save_model(self, request, obj, form, change):
        namespace_policy_save(policy=obj)  # allowed presets are saved by save_related

    def remove(self, obj: NamespacePolicy) -> None:
        namespace_policy_delete(policy=obj)

    @admin.action(description="Preview a Pod in the selected policy's namespace")
    def preview_pod_action(self, request, queryset):
        policy = queryset.first()
        namespace = policy.namespace if policy else ""
        if is_namespace_pattern(namespace):
            namespace = ""  # a pattern is not a namespace: the operator types one that matches it
        url = reverse("admin:profiles_pod_preview")
        return HttpResponseRedirect(f"{url}?{urlencode({'namespace': namespace})}" if namespace else url)

    def get_urls(self):
        return [
            path("preview/", self.admin_site.admin_view(self.preview_view), name="profiles_pod_preview"),
            *super().get_urls(),
        ]

    def preview_view(self, request):
        """Paste a Pod, choose a namespace: what /mutate would do with it (nothing is saved or audited)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        result = None
        if request.method == "POST":
            form = PodPreviewForm(request.POST)
            if form.is_valid():
                pod = form.cleaned_data["pod_yaml"]
                preview = pod_preview(pod=pod, namespace=form.cleaned_data["namespace"])
                result = {
                    **preview_answer(preview),
                    "pod_yaml": pod_yaml(pod=preview.result.pod),
                    "diff": pod_yaml_diff(before=pod, after=preview.result.pod),
                    "patch_text": json.dumps(preview.patch, indent=2),
                }
        else:
            form = PodPreviewForm(initial={"namespace": request.GET.get("namespace", "")})
        context = {
            **self.admin_site.each_context(request),
            "title": "Preview a Pod",
            "opts": self.model._meta,
            "form": form,
            "preview": result,
        }
        return TemplateResponse(request, "admin/profiles/pod_preview.html", context)


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    """What `manage.py sync_quotas` last did per namespace: read-only (the command writes it)."""

    list_display = ["namespace", "policy_namespace", "action", "synced_at", "message"]
    list_filter = ["action"]
    search_fields = ["namespace", "policy_namespace"]
    readonly_fields = ["namespace", "policy_namespace", "hard", "status_hard", "status_used", "action", "message",
                       "synced_at"]


# DRF's own token admin lists every user's key in plaintext; its table is emptied by migration
# profiles.0004 and no longer used (profiles/api/authentication.py).
try:
    from rest_framework.authtoken.models import TokenProxy

    admin.site.unregister(TokenProxy)
except (ImportError, NotRegistered):
    pass


@admin.register(ApiToken)
class ApiTokenAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    """Tokens by user, with expiry and last use; never the token (only its digest is stored). Delete to revoke.
    Issued by manage.py issue_token, which shows the token once: nothing to add here."""

    list_display = ("prefix", "user", "created_at", "expires_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "prefix")
    readonly_fields = ("user", "prefix", "created_at", "expires_at", "last_used_at")
    exclude = ("digest",)
