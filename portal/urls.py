"""Top-level URLs: the pages (with their login and logout), the API and its schema, health and admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal import metrics, views
from portal.api.users import CurrentUserView
from portal.login import ThrottledAdminAuthenticationForm, ThrottledLoginView
from telemetry_ui.ingest import otlp_receiver, sink

urlpatterns = [
    path(
        "login/",
        ThrottledLoginView.as_view(
            template_name="frontend/login.html", redirect_authenticated_user=True, next_page="home"
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("api/me/", CurrentUserView.as_view(), name="api-me"),
    path("api/monitor/", include("telemetry_ui.live.urls")),
    # KIP-714 telemetry sink (telemetry_ui/ingest/sink.py): what a Kafka client's telemetry reporter talks to.
    path("telemetry/v1/<str:cluster>/get-subscriptions", sink.get_subscriptions, name="telemetry-get-subscriptions"),
    path("telemetry/v1/<str:cluster>/push", sink.push, name="telemetry-push"),
    # OTLP/HTTP metrics receiver (telemetry_ui/ingest/otlp_receiver.py): the KIP-714 broker plugin, OpenTelemetry
    # Collectors.
    path("v1/metrics", otlp_receiver.export_metrics, name="otlp-metrics"),
    path("api/", include("quotas.api.urls")),
    path("api/", include("history.urls")),
    path("api/", include("plans.urls")),  # quotas as code: state.yaml, plans, the quota file's JSON Schema
    path("api/", include("access_tokens.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: no inline <script> for the Content-Security-Policy.
    path("api/schema/swagger-ui/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]

# Django's error pages: JSON in the API's error shape under /api/, HTML elsewhere (portal/errors.py).
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"

# The admin's sign-in counts and refuses as the portal's does (portal/login.py).
admin.site.login_form = ThrottledAdminAuthenticationForm
