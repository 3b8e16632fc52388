"""The clusters whose quotas the portal manages, and their brokers and listeners."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction
from django.dispatch import Signal

from quotas.choices import ConnectorKind, QuotaScope, SaslMechanism, SecurityProtocol

#: Cluster names appear in URLs and in the engine's Redis namespaces (inside a {hash tag}), so keep them plain.
cluster_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_-]*\Z",
    "Use letters, digits, '-' and '_' only, starting with a letter or digit.",
)


#: A broker's engine: one Redis (``redis://``, ``rediss://``, ``unix://``) or a Redis Cluster (``redis+cluster://``,
#: ``rediss+cluster://``; any nodes, the client finds the slots), as ``engine.redis_backend.connect`` takes them.
ENGINE_URL_VALIDATOR = RegexValidator(
    r"^(rediss?(\+cluster)?|unix)://",
    "Use a redis://, rediss://, unix:// URL, or redis+cluster://host:port[,host:port...] (rediss+cluster:// for TLS) "
    "for a Redis Cluster.",
)


#: Sent after a commit that leaves push targets behind desired state (a new version, a new broker), with
#: ``cluster_id`` and ``broker_pks`` (None: the cluster-wide namespace). The push layer (``quotas.push.dispatch``)
#: connects to it and enqueues the pushes: the models do not know the push.
push_wanted = Signal()


class Cluster(models.Model):
    """A Kafka-style cluster: where its desired quotas are pushed and how they are scoped."""

    name = models.CharField(max_length=64, unique=True, validators=[cluster_name_validator])
    description = models.CharField(max_length=200, blank=True)
    connector = models.CharField(
        max_length=16,
        choices=ConnectorKind.choices,
        default=ConnectorKind.ENGINE,
        help_text="engine: the quota engine in Redis; kafka: the cluster's Admin API.",
    )
    scope = models.CharField(
        max_length=16,
        choices=QuotaScope.choices,
        default=QuotaScope.PER_BROKER,
        help_text="per_broker as Kafka does; cluster_wide (one shared budget) needs the engine.",
    )
    bootstrap_servers = models.CharField(
        max_length=1000, blank=True,
        help_text="kafka: host:port[,host:port...] the connector connects to; empty = the brokers' hosts.",
    )
    security_protocol = models.CharField(
        max_length=16, choices=SecurityProtocol.choices, default=SecurityProtocol.PLAINTEXT,
        help_text="kafka: PLAINTEXT, or SASL_PLAINTEXT with a SCRAM user (its password from the environment).",
    )
    sasl_mechanism = models.CharField(max_length=16, choices=SaslMechanism.choices, blank=True, default="")
    sasl_username = models.CharField(
        max_length=255, blank=True,
        help_text="kafka: the SCRAM user the portal pushes as (password: env QUOTAS_KAFKA_PASSWORD_<NAME>).",
    )
    capacity_in_bytes_per_s = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Ingress capacity; empty = unknown."
    )
    capacity_out_bytes_per_s = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Egress capacity; empty = unknown."
    )
    created = models.DateTimeField(auto_now_add=True)
    last_updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Kafka's brokers cannot share one budget: only the engine keeps a cluster-wide namespace.
            models.CheckConstraint(
                condition=~models.Q(connector=ConnectorKind.KAFKA, scope=QuotaScope.CLUSTER_WIDE),
                name="quotas_cluster_kafka_is_per_broker",
                violation_error_message="A kafka cluster can only be scoped per_broker; cluster_wide needs the engine.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def password_env(self) -> str:
        """The environment variable holding the SCRAM password of ``sasl_username``."""
        return "QUOTAS_KAFKA_PASSWORD_" + self.name.upper().replace("-", "_")

    def kafka_password(self) -> str | None:
        """The SCRAM password of ``sasl_username``, read at each push: from the file named by ``<password_env>_FILE``
        (a mounted secret, rotated in place), else from ``password_env``; None when neither holds one.

        Read each time, so a rotated secret is used by the next push without restarting the workers; a file that
        cannot be read counts as no password (the push then fails with a typed error naming both variables).
        """
        path = os.environ.get(self.password_env + "_FILE", "").strip()
        if path:
            try:
                return Path(path).read_text(encoding="utf-8").rstrip("\r\n") or None
            except (OSError, UnicodeDecodeError):
                return None
        return os.environ.get(self.password_env) or None

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saved in a transaction: a new cluster's version row (``quotas.models.pushes``, on ``post_save``) is made
        with it or not at all."""
        with transaction.atomic():
            super().save(*args, **kwargs)


class Broker(models.Model):
    """One broker of a cluster; per-broker quotas are pushed to each of them."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="brokers")
    broker_id = models.PositiveIntegerField(help_text="Kafka's broker.id (node.id).")
    host = models.CharField(max_length=255, help_text="host:port the connector reaches the broker at.")
    engine_url = models.CharField(
        max_length=255,
        blank=True,
        validators=[ENGINE_URL_VALIDATOR],
        help_text="Engine clusters: Redis URL of this broker's engine (redis+cluster://host:port,... for a Redis "
        "Cluster); empty = the engine's Redis of the settings.",
    )

    class Meta:
        ordering = ["cluster", "broker_id"]
        constraints = [models.UniqueConstraint(fields=["cluster", "broker_id"], name="quotas_broker_unique_id")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/broker-{self.broker_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A new broker gets the cluster's whole desired state pushed once it is committed."""
        adding = self._state.adding
        super().save(*args, **kwargs)
        if adding and self.cluster.scope == QuotaScope.PER_BROKER:  # a cluster-wide one has a single namespace
            cluster_id, pk = self.cluster_id, self.pk

            def push_new_broker() -> None:
                push_wanted.send(sender=Broker, cluster_id=cluster_id, broker_pks=[pk])

            transaction.on_commit(push_new_broker)


class Listener(models.Model):
    """A listener of a cluster's brokers (KIP-612 connection quotas are per listener)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="listeners")
    name = models.CharField(max_length=64, help_text="The listener name, e.g. PLAINTEXT or INTERNAL.")
    is_inter_broker = models.BooleanField(
        default=False, help_text="The inter-broker listener bypasses the broker-wide connection limits."
    )

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="quotas_listener_unique_name"),
            models.UniqueConstraint(
                fields=["cluster"],
                condition=models.Q(is_inter_broker=True),
                name="quotas_listener_one_inter_broker",
                violation_error_message="A cluster has one inter-broker listener.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"
