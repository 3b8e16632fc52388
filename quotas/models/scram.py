"""SASL/SCRAM credentials the portal made on a Kafka cluster: who has one, which mechanism, made and rotated when.

Kafka holds the credential itself (salt, stored and server keys); this row only records that the portal made it,
for whom (the principal and its tenant), by whom and when, so that admins can see who has credentials and how
old they are. There is deliberately no column for the password, the salt or the salted password: the password
is generated, sent to Kafka salted and shown once to the person who asked (``quotas.scram``), and nothing in the
database could give it back.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from quotas.choices import SaslMechanism
from quotas.models.clusters import Cluster
from quotas.models.tenants import Tenant

#: Kafka's two SCRAM mechanisms (the SASL mechanism choices without "none").
SCRAM_MECHANISM_CHOICES = [(m.value, m.label) for m in (SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512)]


class ScramCredential(models.Model):
    """One mechanism's credential of one user principal on one Kafka cluster, as the portal last set it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="scram_credentials")
    user = models.CharField(max_length=255, help_text="The user principal (Kafka's SCRAM user name).")
    mechanism = models.CharField(max_length=16, choices=SCRAM_MECHANISM_CHOICES)
    iterations = models.PositiveIntegerField(help_text="PBKDF2 iterations Kafka stores with it (4096..16384).")
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="scram_credentials",
        help_text="The tenant owning the principal when it was made (empty: none or several did).",
    )
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150, help_text="The username; outlives the account.")
    rotated = models.DateTimeField(null=True, blank=True, help_text="The last new password; empty = never rotated.")
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rotated_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["cluster", "user", "mechanism"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "user", "mechanism"], name="quotas_scram_unique_credential"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}: {self.user} {self.mechanism}"

    @property
    def password_set(self) -> datetime:
        """When the current password was set: the last rotation, else the creation."""
        return self.rotated or self.created
