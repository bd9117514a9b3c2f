"""The GPU inventory in the admin: node pools, nodes and sync runs, read-only (manage.py sync_gpu_inventory writes)."""

from django.contrib import admin

from injector_site.platform.admin_permissions import ViewOnlyAdminMixin

from ..models import GpuInventorySync, GpuNode, GpuNodePool


@admin.register(GpuNodePool)
class GpuNodePoolAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "card_type", "node_count", "cards_per_node", "registered_memory_mib",
                    "physical_memory_mib", "memory_scaling", "mode", "gpu_model", "synced_at"]
    list_filter = ["card_type", "mode"]
    search_fields = ["name", "card_type"]
    list_select_related = ["gpu_model"]
    readonly_fields = [f.name for f in GpuNodePool._meta.fields]


@admin.register(GpuNode)
class GpuNodeAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "pool", "card_type", "cards", "healthy_cards", "registered_memory_mib", "registered",
                    "synced_at"]
    list_filter = ["registered", "card_type"]
    search_fields = ["name", "card_type"]
    list_select_related = ["pool"]
    readonly_fields = [f.name for f in GpuNode._meta.fields]


@admin.register(GpuInventorySync)
class GpuInventorySyncAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["finished_at", "succeeded", "changed", "gpu_nodes", "pools", "duration_seconds", "error"]
    list_filter = ["succeeded"]
    readonly_fields = [f.name for f in GpuInventorySync._meta.fields]
    show_full_result_count = False
