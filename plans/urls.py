"""URLs of the quotas-as-code API, included under /api/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from plans import api

app_name = "plans-api"

router = SimpleRouter()
router.register("plan-requests", api.PlanRequestViewSet, basename="plan-request")

urlpatterns = [
    path("schema/quotas-file.json", api.QuotasFileSchemaView.as_view(), name="quotas-file-schema"),
    path("clusters/<str:cluster>/state.yaml", api.StateExportView.as_view(), name="state-export"),
    path("clusters/<str:cluster>/plans/", api.PlanCreateView.as_view(), name="plan-create"),
    path("plans/<int:pk>/", api.PlanDetailView.as_view(), name="plan-detail"),
    path("plans/<int:pk>/apply/", api.PlanApplyView.as_view(), name="plan-apply"),
    *router.urls,
]
