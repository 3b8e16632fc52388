"""Impact previews of proposed quotas and the hourly usage rollups, as the pipeline computed them.

A preview is cached per proposal and per state of the landed usage (``data_version``): asking again for the
same (cluster, entity, key, value) while no new usage has landed returns the same row, finished or running.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from engine.entities import entity_path
from quotas.choices import BudgetScope, QuotaKey
from quotas.models.clusters import Cluster
from quotas.models.groups import QuotaGroup


class PreviewState(models.TextChoices):
    QUEUED = "queued", "Waiting for a worker"
    RUNNING = "running", "Replaying the history"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ImpactPreview(models.Model):
    """What a proposed quota would have done to the entity's recorded traffic (``pipeline.whatif``), and the
    right-sizing advice for the same records (``pipeline.advice``)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="impact_previews")
    user = models.CharField(max_length=255, null=True, blank=True)
    client_id = models.CharField(max_length=255, null=True, blank=True)
    key = models.CharField(max_length=32, choices=QuotaKey.choices)
    value = models.FloatField()
    scope = models.CharField(
        max_length=16, choices=BudgetScope.choices, default=BudgetScope.PER_BROKER,
        help_text="per_broker (Kafka's meaning) or cluster_wide: replayed as one budget for all brokers.",
    )
    group = models.ForeignKey(
        QuotaGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="impact_previews",
        help_text="A group value's preview: the group (user and client_id then null).",
    )
    group_name = models.CharField(max_length=64, blank=True, help_text="The group's name (kept if it is deleted).")
    group_spec = models.TextField(
        blank=True, help_text="The group's members as replayed (engine.groups.GroupSpec JSON, no values)."
    )
    proposal = models.CharField(
        max_length=64, help_text="SHA-256 of (cluster, user, client-id, key, value, scope[, group spec])."
    )
    data_version = models.CharField(max_length=64, help_text="The landed usage this preview replays.")
    state = models.CharField(max_length=16, choices=PreviewState.choices, default=PreviewState.QUEUED)
    progress = models.FloatField(default=0.0, help_text="0..1, while it runs.")
    stage = models.CharField(max_length=64, blank=True, help_text="What the job is doing now.")
    result = models.JSONField(null=True, blank=True, help_text="pipeline.whatif's JSON, with its advice.")
    error_code = models.CharField(max_length=32, blank=True, help_text="NO_HISTORY, MISSING_INPUT, ...")
    error_message = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="impact_previews"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.UniqueConstraint(fields=["proposal", "data_version"], name="history_preview_once_per_data"),
            models.CheckConstraint(condition=Q(state__in=PreviewState.values), name="history_preview_known_state"),
        ]

    def __str__(self) -> str:
        return f"preview #{self.pk} {self.cluster_id}:{self.entity} {self.key}={self.value!r} ({self.state})"

    @property
    def entity(self) -> str:
        if self.group_name:
            return f"/groups/{self.group_name}"
        return entity_path(self.user, self.client_id)

    @property
    def finished(self) -> bool:
        return self.state in (PreviewState.DONE, PreviewState.FAILED)


class UsageRollup(models.Model):
    """One entity's usage over one hour (``pipeline.rollups``), loaded for the entity page's history chart.

    ``tags`` are the entity's sensor tags (``<sanitized user>:<client-id>``), the key the live monitor uses.
    """

    cluster = models.CharField(max_length=64)
    quota_type = models.CharField(max_length=32)
    tags = models.CharField(max_length=600)
    granularity = models.CharField(max_length=8, default="hour")
    window_start = models.DateTimeField()
    bytes = models.FloatField(help_text="Sum of the per-second rates: the amount over the window.")
    rate_p50 = models.FloatField()
    rate_p95 = models.FloatField()
    rate_p99 = models.FloatField()
    rate_max = models.FloatField()
    throttle_ms = models.FloatField(help_text="Time spent throttled, summed over brokers.")
    throttled_fraction = models.FloatField()
    tokens_min = models.FloatField(null=True, blank=True)
    seconds = models.PositiveIntegerField(help_text="Seconds of the window that had a sample.")

    class Meta:
        ordering = ["window_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "quota_type", "tags", "granularity", "window_start"], name="history_rollup_once"
            )
        ]
        indexes = [
            models.Index(fields=["cluster", "tags", "granularity", "window_start"], name="history_rollup_entity")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}:{self.tags} {self.quota_type} {self.granularity} {self.window_start:%Y-%m-%d %H:%M}"
