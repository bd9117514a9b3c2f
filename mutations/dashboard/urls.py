"""The audit dashboard (mounted at /dashboard/): staff with the audit view permission."""

from django.urls import path

from . import changes, configuration, inventory, recommendations, views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("history/", views.history, name="history"),
    path("history.csv", views.export_csv, name="export"),
    path("admissions/<int:audit_id>/", views.detail, name="detail"),
    path("budgets/", views.budgets, name="budgets"),
    path("rehearsal/", views.rehearsal_view, name="rehearsal"),
    path("policies/<path:name>/", configuration.policy, name="policy"),
    path("presets/<str:name>/", configuration.preset, name="preset"),
    path("models/<path:name>/", configuration.language_model, name="model"),
    path("gpu-pools/", inventory.gpu_pools, name="gpu_pools"),
    path("gpu-pools/<str:name>/", inventory.gpu_pool, name="gpu_pool"),
    path("recommendations/", recommendations.recommendations, name="recommendations"),
    path("changes/", changes.changes, name="changes"),
    path("changes/<int:change_id>/", changes.change, name="change"),
]
