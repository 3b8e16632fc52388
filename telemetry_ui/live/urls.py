"""URLs of the monitor API, included under /api/monitor/ by portal/urls.py."""

from django.urls import path

from telemetry_ui.live import api

app_name = "monitor-api"

urlpatterns = [
    path("<str:cluster>/recent/", api.MonitorRecentView.as_view(), name="recent"),
    path("<str:cluster>/history/", api.MonitorHistoryView.as_view(), name="history"),
]
