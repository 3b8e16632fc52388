"""Default pagination for the API."""

from rest_framework.pagination import CursorPagination


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
