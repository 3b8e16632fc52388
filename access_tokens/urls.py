"""URLs of the token API, included under /api/."""

from rest_framework.routers import SimpleRouter

from access_tokens.api import AccessTokenViewSet

app_name = "access-tokens"

router = SimpleRouter()
router.register("tokens", AccessTokenViewSet, basename="token")

urlpatterns = router.urls
