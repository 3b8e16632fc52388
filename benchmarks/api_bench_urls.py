"""The portal's URLs plus ``/bench/trivial``, the baseline of ``benchmarks/api_bench.py`` (never deployed)."""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.urls import urlpatterns as portal_urlpatterns


class TrivialView(APIView):
    """``{"ok": true}`` behind the API's default token/session authentication and IsAuthenticated.

    It costs what every API request costs (ASGI, middleware, token lookup, JSON rendering) and nothing
    more, so an endpoint's requests/s divided by this view's is the share its own work leaves.
    """

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [path("bench/trivial", TrivialView.as_view(), name="bench-trivial"), *portal_urlpatterns]
