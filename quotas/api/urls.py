"""URLs of the quota API, included under /api/ (NetBox style: one router per app)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from quotas.api import client_metrics, scram, webhooks
from quotas.api.views import (
    audit,
    client_quotas,
    clusters,
    configs,
    exempt_principals,
    groups,
    metrics,
    pushes,
    requests,
    tenants,
)

app_name = "quotas-api"

router = SimpleRouter()
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("tenants", tenants.TenantViewSet, basename="tenant")
router.register("requests", requests.QuotaRequestViewSet, basename="request")
router.register("audit", audit.AuditEntryViewSet, basename="audit")
router.register("pushes", pushes.PushViewSet, basename="push")
router.register("drift", pushes.DriftViewSet, basename="drift")
router.register("subscription-requests", client_metrics.SubscriptionRequestViewSet, basename="subscription-request")
router.register("webhooks", webhooks.WebhookViewSet, basename="webhook")
router.register("webhook-deliveries", webhooks.WebhookDeliveryViewSet, basename="webhook-delivery")

# Kafka's admin operations keep their verb names, as RPCs on a cluster.
urlpatterns = [
    path(
        "clusters/<str:cluster>/client-quotas/describe",
        client_quotas.DescribeClientQuotasView.as_view(),
        name="client-quotas-describe",
    ),
    path(
        "clusters/<str:cluster>/client-quotas/alter",
        client_quotas.AlterClientQuotasView.as_view(),
        name="client-quotas-alter",
    ),
    path("clusters/<str:cluster>/broker-configs", configs.BrokerConfigsView.as_view(), name="broker-configs"),
    path(
        "clusters/<str:cluster>/client-metrics/", client_metrics.ClientMetricsListView.as_view(), name="client-metrics"
    ),
    path(
        "clusters/<str:cluster>/client-metrics/<str:subscription>/",
        client_metrics.ClientMetricsDetailView.as_view(),
        name="client-metrics-detail",
    ),
    path(
        "clusters/<str:cluster>/scram-credentials/", scram.ScramCredentialListView.as_view(), name="scram-credentials"
    ),
    path(
        "clusters/<str:cluster>/scram-credentials/<str:user>/",
        scram.ScramCredentialDetailView.as_view(),
        name="scram-credentials-detail",
    ),
    path(
        "clusters/<str:cluster>/scram-credentials/<str:user>/rotate/",
        scram.ScramCredentialRotateView.as_view(),
        name="scram-credentials-rotate",
    ),
    path("clusters/<str:cluster>/groups/", groups.GroupListView.as_view(), name="groups"),
    path("clusters/<str:cluster>/groups/<str:group>/", groups.GroupDetailView.as_view(), name="group-detail"),
    path("clusters/<str:cluster>/groups/<str:group>/values", groups.GroupValuesView.as_view(), name="group-values"),
    path(
        "clusters/<str:cluster>/exempt-principals/",
        exempt_principals.ExemptPrincipalListView.as_view(),
        name="exempt-principals",
    ),
    path(
        "clusters/<str:cluster>/exempt-principals/<str:principal>/",
        exempt_principals.ExemptPrincipalDetailView.as_view(),
        name="exempt-principals-detail",
    ),
    path("metrics/memory", metrics.MemoryMetricsView.as_view(), name="memory-metrics"),
    path("clusters/<str:cluster>/effective-quota", client_quotas.EffectiveQuotaView.as_view(), name="effective-quota"),
    *router.urls,
]
