"""URLs of the history API, included under /api/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from history import api

app_name = "history-api"

router = SimpleRouter()
router.register("previews", api.PreviewViewSet, basename="preview")

urlpatterns = [
    path("clusters/<str:cluster>/usage-history/", api.UsageHistoryView.as_view(), name="usage-history"),
    *router.urls,
]
