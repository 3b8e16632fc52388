"""URLs of the quota API, included under /api/ (NetBox style: one router per app)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from quotas.api import client_metrics, scram, views, webhooks

app_name = "quotas-api"

router = SimpleRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("requests", views.QuotaRequestViewSet, basename="request")
router.register("audit", views.AuditEntryViewSet, basename="audit")
router.register("pushes", views.PushViewSet, basename="push")
router.register("drift", views.DriftViewSet, basename="drift")
router.register("subscription-requests", client_metrics.SubscriptionRequestViewSet, basename="subscription-request")
router.register("webhooks", webhooks.WebhookViewSet, basename="webhook")
router.register("webhook-deliveries", webhooks.WebhookDeliveryViewSet, basename="webhook-delivery")

# Kafka's admin operations keep their verb names, as RPCs on a cluster.
urlpatterns = [
    path(
        "clusters/<str:cluster>/client-quotas/describe",
        views.DescribeClientQuotasView.as_view(),
        name="client-quotas-describe",
    ),
    path(
        "clusters/<str:cluster>/client-quotas/alter",
        views.AlterClientQuotasView.as_view(),
        name="client-quotas-alter",
    ),
    path("clusters/<str:cluster>/broker-configs", views.BrokerConfigsView.as_view(), name="broker-configs"),
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
    path("metrics/memory", views.MemoryMetricsView.as_view(), name="memory-metrics"),
    path("clusters/<str:cluster>/effective-quota", views.EffectiveQuotaView.as_view(), name="effective-quota"),
    *router.urls,
]
