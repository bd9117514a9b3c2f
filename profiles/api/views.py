"""REST API views: thin ModelViewSets over the services, and the preview endpoint."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.db.models import ProtectedError, QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from mutations.webhook.decide import pod_preview, preview_answer

from ..changes import change_reason
from ..selectors import gpu_model_list, namespace_policy_list, preset_list
from ..services import (
    ConfigurationInUse,
    PodDocumentError,
    gpu_model_delete,
    gpu_model_save,
    namespace_policy_delete,
    namespace_policy_save,
    pod_document_check,
    pod_document_parse,
    preset_delete,
    preset_save,
)
from . import filters
from .parsers import PodTextYAMLParser, PodYAMLParser
from .permissions import ConfigurationPermissions
from .serializers import (
    GpuModelSerializer,
    NamespacePolicySerializer,
    PodPreviewRequestSerializer,
    PodPreviewResponseSerializer,
    PresetSerializer,
)

# Which field a database constraint guards, for the rare write that passes validation but loses a race.
CONSTRAINT_FIELDS = {
    "profiles_preset_single_default": "is_default",
    "profiles_preset_default_enabled": "enabled",
    "profiles_preset_memory_positive": "vgpu_memory_mib",
    "profiles_preset_cores_percent": "vgpu_cores_percent",
    "profiles_preset_model_size_range": "max_model_size_b",
    "profiles_preset_name_key": "name",
    "profiles_gpumodel_memory_positive": "memory_mib",
    "profiles_gpumodel_name_key": "name",
    "profiles_gpumodel_ratio_range": "oversubscription_ratio",
    "profiles_oversubscriptionpolicy_ratio_range": "oversubscription_ratio",
    "profiles_oversubscriptionpolicy_selects_nodes": "node_selector",
    "profiles_oversubscriptionpolicy_one_per_selector": "node_selector",
    "profiles_oversubscriptionpolicy_name_key": "name",
    "profiles_namespacepolicy_namespace_key": "namespace",
    "profiles_namespacepolicy_mode_valid": "mode",
    "profiles_namespacepolicy_scheduler_scope_valid": "scheduler_scope",
    "profiles_languagemodel_name_key": "name",
    "profiles_languagemodel_params_positive": "params_b",
    "profiles_languagemodel_active_params": "active_params_b",
    "profiles_languagemodel_shape_positive": "layers",
    "profiles_languagemodel_window_layers": "sliding_window_layers",
    "profiles_languagemodel_dtype_valid": "dtype",
    "profiles_languagemodel_heads_vision": "attention_heads",
}


def _constraint_error(model, exc: IntegrityError) -> serializers.ValidationError:
    name = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None) or ""
    message = next((c.violation_error_message for c in model._meta.constraints if c.name == name), None)
    field = next((f for c, f in CONSTRAINT_FIELDS.items() if c == name or name.startswith(c)), "non_field_errors")
    return serializers.ValidationError({field: [str(message or "This value conflicts with another row; reload "
                                                               "and try again.")]})


class ConfigurationPagination(PageNumberPagination):
    """PAGE_SIZE rows a page; scripts may ask for up to 500 with ?page_size=."""

    page_size_query_param = "page_size"
    max_page_size = 500


class ConfigurationViewSet(viewsets.ModelViewSet):
    """Shared write handling: services save and delete; constraint races and in-use rows answer 400."""

    queryset: QuerySet[Any]  # each subclass sets it
    permission_classes = [ConfigurationPermissions]
    pagination_class = ConfigurationPagination

    def save(self, instance):
        raise NotImplementedError

    def remove(self, instance):
        raise NotImplementedError

    def perform_create(self, serializer):
        with change_reason(self._reason()):
            self.serializer_save(serializer, self.queryset.model())

    def perform_update(self, serializer):
        with change_reason(self._reason()):
            self.serializer_save(serializer, serializer.instance)

    def _reason(self) -> str:
        """The optional `reason` of a create, edit or delete (in the body, or ?reason= for a DELETE): kept on the
        change it makes."""
        data = self.request.data if hasattr(self.request.data, "get") else {}
        value = data.get("reason") or self.request.query_params.get("reason") or ""
        return value if isinstance(value, str) else ""

    def serializer_save(self, serializer, instance):
        """Save `instance` with the serializer's validated data through this kind's save service (create, edit,
        restore); a constraint race is a 400 naming the field."""
        data = dict(serializer.validated_data)
        many = {k: data.pop(k) for k in list(data) if k in self.many_to_many}
        for name, value in data.items():
            setattr(instance, name, value)
        try:
            saved = self.save(instance, **many)
        except IntegrityError as exc:
            raise _constraint_error(self.queryset.model, exc) from exc
        # Answer with the row as a GET would show it (with its used-by counts).
        serializer.instance = self.get_queryset().get(pk=saved.pk)

    def perform_destroy(self, instance):
        try:
            with change_reason(self._reason()):
                self.remove(instance)
        except ConfigurationInUse as exc:
            raise serializers.ValidationError({"detail": exc.message}) from exc
        except ProtectedError as exc:  # a reference added since the service looked
            users = ", ".join(sorted(str(o) for o in exc.protected_objects))
            raise serializers.ValidationError({"detail": f"{instance} is still used by {users}."}) from exc

    many_to_many: tuple[str, ...] = ()


@extend_schema(tags=["configuration"])
class GpuModelViewSet(ConfigurationViewSet):
    """GPU models: the card types in the cluster."""

    queryset = gpu_model_list()
    serializer_class = GpuModelSerializer
    filterset_class = filters.GpuModelFilter
    search_fields = ["name", "match", "description"]
    ordering_fields = ["name", "memory_mib", "match", "created_at", "updated_at"]
    ordering = ["name"]

    def save(self, instance):
        return gpu_model_save(gpu_model=instance)

    def remove(self, instance):
        gpu_model_delete(gpu_model=instance)


@extend_schema(tags=["configuration"])
class PresetViewSet(ConfigurationViewSet):
    """Presets: named vGPU sizes for classes of workload."""

    queryset = preset_list()
    serializer_class = PresetSerializer
    filterset_class = filters.PresetFilter
    search_fields = ["name", "description"]
    ordering_fields = ["name", "vgpu_memory_mib", "vgpu_cores_percent", "min_model_size_b", "max_model_size_b",
                       "created_at", "updated_at"]
    ordering = ["vgpu_memory_mib", "name"]

    def save(self, instance):
        return preset_save(preset=instance)

    def remove(self, instance):
        preset_delete(preset=instance)


@extend_schema(tags=["configuration"])
class NamespacePolicyViewSet(ConfigurationViewSet):
    """Namespace policies: per namespace or pattern (exact beats pattern, longer pattern beats shorter)."""

    queryset = namespace_policy_list()
    serializer_class = NamespacePolicySerializer
    filterset_class = filters.NamespacePolicyFilter
    search_fields = ["namespace", "description"]
    ordering_fields = ["namespace", "mode", "max_vgpus_per_pod", "max_vgpu_memory_mib", "created_at", "updated_at"]
    ordering = ["namespace"]
    many_to_many = ("allowed_presets",)

    def save(self, instance, allowed_presets=None):
        return namespace_policy_save(policy=instance, allowed_presets=allowed_presets)

    def remove(self, instance):
        namespace_policy_delete(policy=instance)


POD_EXAMPLE = {
    "namespace": "team-a",
    "pod": {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vllm", "annotations": {"volcano-injector.io/model-size": "7B"}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    },
}


class PodPreviewView(APIView):
    """What /mutate would do with a Pod in a namespace: the same engine, nothing audited."""

    permission_classes = [IsAuthenticated]
    parser_classes = [JSONParser, PodYAMLParser, PodTextYAMLParser]

    @extend_schema(
        request=PodPreviewRequestSerializer,
        responses={200: PodPreviewResponseSerializer},
        examples=[OpenApiExample("A 7B model", value=POD_EXAMPLE, request_only=True)],
        description="POST {namespace, pod} as JSON (pod: an object, or a string of YAML), or the Pod's YAML as "
                    "the body with Content-Type application/yaml and ?namespace=.",
    )
    def post(self, request, *args, **kwargs):
        data = request.data
        if isinstance(data, dict) and "namespace" not in data and "namespace" in request.query_params:
            data = {**data, "namespace": request.query_params["namespace"]}
        form = PodPreviewRequestSerializer(data=data)
        form.is_valid(raise_exception=True)
        pod = form.validated_data["pod"]
        try:
            pod = pod_document_parse(text=pod) if isinstance(pod, str) else pod_document_check(document=pod)
        except PodDocumentError as exc:
            return Response({"pod": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        preview = pod_preview(pod=pod, namespace=form.validated_data["namespace"])
        return Response(preview_answer(preview))
