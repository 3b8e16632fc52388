"""URLs of the HTML pages, included at the site root by ``portal.urls``."""

from django.urls import path

from frontend import (
    client_metrics_views,
    credentials_views,
    history_views,
    monitor_views,
    plan_views,
    telemetry_views,
    views,
)

urlpatterns = [
    path("", views.home, name="home"),
    path("entities/", views.entity_list, name="entity-list"),
    path("entities/<int:pk>/", views.entity_detail, name="entity-detail"),
    path("requests/", views.request_list, name="request-list"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/<int:pk>/", views.request_detail, name="request-detail"),
    path("requests/<int:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<int:pk>/reject/", views.request_reject, name="request-reject"),
    path("requests/<int:pk>/withdraw/", views.request_withdraw, name="request-withdraw"),
    path("previews/<int:pk>/", history_views.preview_fragment, name="preview-fragment"),
    path("approvals/", views.approval_queue, name="approval-queue"),
    path("plans/<int:pk>/", plan_views.plan_detail, name="plan-detail"),
    path("plan-requests/<int:pk>/approve/", plan_views.plan_request_approve, name="plan-request-approve"),
    path("plan-requests/<int:pk>/reject/", plan_views.plan_request_reject, name="plan-request-reject"),
    path("audit/", views.audit_log, name="audit-log"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<str:name>/client-metrics/", client_metrics_views.client_metrics, name="client-metrics"),
    path("tenants/", views.tenant_list, name="tenant-list"),
    path("credentials/", credentials_views.credentials, name="credentials"),
    path("drift/", views.drift, name="drift"),
    path("drift/reapply/", views.drift_reapply, name="drift-reapply"),
    path("monitor/", monitor_views.overview, name="monitor-overview"),
    path("monitor/<str:cluster>/entity/", monitor_views.entity, name="monitor-entity"),
    path("telemetry/", telemetry_views.index, name="telemetry-index"),
    path("telemetry/<str:cluster>/", telemetry_views.cluster_instances, name="telemetry-cluster"),
    path("telemetry/<str:cluster>/instance/<str:instance>/", telemetry_views.instance_detail,
         name="telemetry-instance"),
    path("telemetry/<str:cluster>/client/<path:client_id>/", telemetry_views.client_detail, name="telemetry-client"),
]
