"""Top-level URLs: the pages, the API and its schema, health and admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from frontend import views as frontend_views
from portal import views
from portal.api import CurrentUserView

urlpatterns = [
    path("", frontend_views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("api/me/", CurrentUserView.as_view(), name="api-me"),
    path("api/", include("quotas.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/schema/swagger-ui/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
]
