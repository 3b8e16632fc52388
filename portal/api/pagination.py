"""Default pagination for the API."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

MAX_PAGE_SIZE = 500
#: ``page_size`` in the schema (a larger one is cut to the most, as DRF does).
PAGE_SIZE_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE}
PAGE_SIZE_PARAM = OpenApiParameter(
    "page_size", PAGE_SIZE_SCHEMA, OpenApiParameter.QUERY, description=f"At most {MAX_PAGE_SIZE} (default 50)."
)


class DefaultCursorPagination(CursorPagination):
    """Cursor pagination, 50 items a page.

    Cursors stay stable while rows are inserted (quota requests, audit entries
    and samples arrive all the time), which offset pagination does not.
    Ordering is by primary key, newest first, because every model has one;
    views with a better field (e.g. a timestamp) set ``ordering`` themselves.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    ordering = "-pk"

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """DRF's parameters, ``page_size`` with its bounds."""
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = dict(PAGE_SIZE_SCHEMA)
        return parameters

    def decode_cursor(self, request: Request) -> Any:
        """A cursor that is not one of ours is a bad parameter (400 INVALID_REQUEST), not a missing page (DRF's 404)."""
        try:
            return super().decode_cursor(request)
        except NotFound:
            message = "cursor is not a cursor this API gave out; follow the `next` or `previous` URL of a page."
            raise ValidationError({"cursor": [message]}) from None
