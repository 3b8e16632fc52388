"""Default pagination for the API."""

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request


class DefaultCursorPagination(CursorPagination):
    """Cursor pagination, 50 items a page.

    Cursors stay stable while rows are inserted (quota requests, audit entries
    and samples arrive all the time), which offset pagination does not.
    Ordering is by primary key, newest first, because every model has one;
    views with a better field (e.g. a timestamp) set ``ordering`` themselves.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-pk"

    def decode_cursor(self, request: Request) -> Any:
        """A cursor that is not one of ours is a bad parameter (400 INVALID_REQUEST), not a missing page (DRF's 404)."""
        try:
            return super().decode_cursor(request)
        except NotFound:
            message = "cursor is not a cursor this API gave out; follow the `next` or `previous` URL of a page."
            raise ValidationError({"cursor": [message]}) from None
