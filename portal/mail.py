"""The mail backend when no mail server is configured: each mail is logged at INFO instead of sent.

Django's console backend writes mails to stdout, which a Celery worker (where the notifications are sent) turns into
WARNING records: a routine mail read as a problem. This backend logs each one on ``portal.mail`` at INFO (the worker
log of ``scripts/run_portal.sh`` has them), with who it is to, its subject and its body.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage

log = logging.getLogger(__name__)


class LoggingEmailBackend(BaseEmailBackend):
    """Logs every mail (not sent: no ``EMAIL_HOST``) at INFO; returns how many, as a backend that sent them would."""

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        for message in email_messages:
            log.info(
                "Mail (not sent: no EMAIL_HOST) from %s to %s\nSubject: %s\n\n%s",
                message.from_email, ", ".join(message.recipients()), message.subject, message.body,
            )
        return len(email_messages)
