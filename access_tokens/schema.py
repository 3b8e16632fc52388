"""The OpenAPI security scheme of personal access tokens (drf-spectacular finds it once imported: apps.ready)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "access_tokens.authentication.AccessTokenAuthentication"
    name = "accessToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal access token (qpt_...) from POST /api/tokens/, scoped to a tenant or, for "
            "admins and auditors, to all of their rights.",
        }
