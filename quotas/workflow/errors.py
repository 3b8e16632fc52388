"""The refusals of the workflow's transitions: a WorkflowError with a code a client branches on.

INVALID_REQUEST (the body is wrong), PERMISSION_DENIED (the caller may not), CONFLICT (the request is no longer in a
state that allows it), STALE_REQUEST and PLAN_STALE (what the request was made against moved on since).
"""

from __future__ import annotations

from typing import Any

from quotas.models import InvalidBudgetScope, QuotaRequest
from quotas.models.staleness import Moved, shown


class WorkflowError(Exception):
    """A refused transition; ``code`` and ``status`` become the API's error body and HTTP status.

    ``field`` names the body field to change, when one is to blame (the API's ``details``, a form's field).
    """

    code = "INVALID_REQUEST"
    status = 400

    #: What the API answers in ``details``, when more than the field is to say (None: the field, if any).
    details: Any = None

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(WorkflowError):
    pass


class PermissionDenied(WorkflowError):
    code = "PERMISSION_DENIED"
    status = 403


class Conflict(WorkflowError):
    code = "CONFLICT"
    status = 409


class StaleRequest(WorkflowError):
    """The key moved on since the request was submitted: approve with ``confirm_stale``, or reject it as
    superseded (409 STALE_REQUEST; ``details`` say what it was, what it is and what changed it)."""

    code = "STALE_REQUEST"
    status = 409

    def __init__(self, request: QuotaRequest, moved: Moved) -> None:
        super().__init__(
            f"Request #{request.pk} was {moved.sentence}; approving it sets {shown(request.key, request.value)}. "
            "Approve it again with confirm_stale to replace the value now, or reject it as superseded."
        )
        self.moved = moved
        self.details = moved.as_dict()


class BudgetScopeRefused(WorkflowError):
    """A budget scope the value cannot have (``quotas.models.check_budget_scope`` says why and what to send)."""

    code = InvalidBudgetScope.code


class PlanStaleError(WorkflowError):
    """The plan's values moved on since it was made; plan the file again (409 PLAN_STALE)."""

    code = "PLAN_STALE"
    status = 409
