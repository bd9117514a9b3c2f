"""The admission audit in the Django admin: read-only, and cheap on a table of millions of rows."""

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.utils.functional import cached_property

from injector_site.platform.admin_permissions import ReadOnlyAdminMixin, ViewOnlyAdminMixin

from ..models import AdmissionAudit, UnconvertedPodScan


class EstimatedCountPaginator(Paginator):
    """Counts a filtered list, but takes PostgreSQL's row estimate for the whole table (no COUNT(*) of millions)."""

    object_list: QuerySet[AdmissionAudit]  # the admin's change list paginates a QuerySet

    @cached_property
    def count(self) -> int:
        query = self.object_list.query
        if connection.vendor == "postgresql" and not query.where:
            with connection.cursor() as cursor:
                cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = %s",
                               [AdmissionAudit._meta.db_table])
                row = cursor.fetchone()
            if row and row[0] > 10_000:
                return int(row[0])
        return super().count


@admin.register(AdmissionAudit)
class AdmissionAuditAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "decision", "namespace", "pod_or_generate_name", "username", "preset_name",
                    "vgpus_granted", "vgpu_memory_mib", "duration_ms")
    list_filter = ("decision", "operation")
    search_fields = ("=request_uid", "pod_name", "generate_name")
    ordering = ("-created_at", "-id")
    show_full_result_count = False  # append-only table of millions: never count it twice per page
    paginator = EstimatedCountPaginator
    list_per_page = 50
    readonly_fields = [f.name for f in AdmissionAudit._meta.fields]

    @admin.display(description="Pod", ordering="pod_name")
    def pod_or_generate_name(self, row: AdmissionAudit) -> str:
        return row.pod_name or row.generate_name


@admin.register(UnconvertedPodScan)
class UnconvertedPodScanAdmin(ViewOnlyAdminMixin, admin.ModelAdmin):
    """Scans for GPU Pods that bypassed the webhook: read-only; deletable, e.g. after removing the CronJob,
    so /metrics stops exporting an old result (and VolcanoInjectorUnconvertedScanStale stops firing)."""

    list_display = ("finished_at", "succeeded", "unconverted", "pods_examined", "error")
    list_filter = ("succeeded",)
    readonly_fields = ("finished_at", "succeeded", "error", "pods_examined", "unconverted", "by_namespace", "pods")
