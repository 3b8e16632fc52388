"""Top-level URLs: the pages (with their login and logout), the API and its schema, health and admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from portal import metrics, views
from portal.api import CurrentUserView
from telemetry_ui import sink

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="frontend/login.html", redirect_authenticated_user=True, next_page="home"
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("api/me/", CurrentUserView.as_view(), name="api-me"),
    path("api/monitor/", include("telemetry_ui.urls")),
    # KIP-714 telemetry sink (telemetry_ui/sink.py): what a Kafka client's telemetry reporter talks to.
    path("telemetry/v1/<str:cluster>/get-subscriptions", sink.get_subscriptions, name="telemetry-get-subscriptions"),
    path("telemetry/v1/<str:cluster>/push", sink.push, name="telemetry-push"),
    path("api/", include("quotas.api.urls")),
    path("api/", include("history.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/schema/swagger-ui/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]
