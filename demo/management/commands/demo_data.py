"""``python manage.py demo_data``: a small world to show the portal with (what ``python manage.py loadgen`` drives).

Two engine clusters (``prod``, ``staging``) of three brokers each (namespaces in the portal's Redis), their
listeners; three tenants with members and owned principal / client-id patterns; demo logins; quotas at several
precedence levels and broker connection limits, set through AlterClientQuotas / IncrementalAlterConfigs (so they
are versioned, audited and pushed); on prod, one pending request that would relieve the throttled
``svc-payments-api`` and one approved boost that ends in about an hour.

It only adds what is missing and never overwrites a value that is there (someone may have changed it in the
demo, or a boost holds it), so running it again changes nothing and says so. Everything is written in one
transaction; the pushes (one pending push per broker, for the newest version) are queued when it commits, so
the Celery worker brings every broker to the newest version with its first push. Brokers still behind desired
state from an earlier run (e.g. the Redis data was removed) get a push queued as well.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from engine.entities import DEFAULT
from quotas.choices import BudgetScope, ConnectorKind, QuotaScope
from quotas.models import (
    ADMINS_GROUP,
    AUDITORS_GROUP,
    Alteration,
    Broker,
    BrokerConfig,
    ClientMetricsSubscription,
    Cluster,
    ConfigOp,
    ConfigResource,
    DesiredStateVersion,
    GroupKind,
    Listener,
    OwnedName,
    QuotaGroup,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    RequestState,
    Tenant,
    alter_configs,
    audited_alter,
    create_group,
    set_exempt,
    set_group_values,
)
from quotas.models.client_metrics import alter_subscription
from quotas.workflow import quota_requests
from traffic.kafka_clients import DEMO_KAFKA_TRAFFIC, MECHANISM, demo_password
from traffic.workload import KIB, MIB, STORM_IP

DEMO_PASSWORD = "quota-demo"
#: With the SASL_PLAINTEXT bootstrap servers of a Kafka cluster here (scripts/run_portal.sh starts one), ``prod`` is
#: that real cluster, pushed to as ``QUOTAS_DEMO_KAFKA_USER`` (password in QUOTAS_KAFKA_PASSWORD_PROD); else engine.
KAFKA_ENV, KAFKA_USER_ENV, KAFKA_CLUSTER = "QUOTAS_DEMO_KAFKA", "QUOTAS_DEMO_KAFKA_USER", "prod"
#: On the real prod: every producer's KIP-714 metrics (queue time among them), pushed every 10 s.
SUBSCRIPTION = "demo-producers"
SUBSCRIPTION_CONFIGS = {"metrics": "org.apache.kafka.producer.", "interval.ms": "10000"}

#: username -> (role shown, staff, superuser, groups, tenant)
USERS: dict[str, tuple[str, bool, bool, tuple[str, ...], str | None]] = {
    "demo-admin": ("admin: approves requests, changes quotas, /admin/", True, True, (ADMINS_GROUP,), None),
    "demo-auditor": ("auditor: reads everything, changes nothing", False, False, (AUDITORS_GROUP,), None),
    "demo-payments": ("member of tenant payments", False, False, (), "payments"),
    "demo-analytics": ("member of tenant analytics", False, False, (), "analytics"),
    "demo-search": ("member of tenant search", False, False, (), "search"),
}

CLUSTERS: dict[str, dict[str, Any]] = {
    "prod": {"description": "Production (demo)", "capacity_in_bytes_per_s": 60 * MIB,
             "capacity_out_bytes_per_s": 120 * MIB},
    "staging": {"description": "Staging (demo)", "capacity_in_bytes_per_s": 20 * MIB,
                "capacity_out_bytes_per_s": 40 * MIB},
}
BROKER_IDS = (1, 2, 3)
LISTENERS = (("PLAINTEXT", False), ("INTERNAL", True))

#: tenant -> (description, owned principal patterns, owned client-id patterns)
TENANTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "payments": ("Checkout, ledger and payouts", ("svc-payments-*",), ("payments-*",)),
    "analytics": ("Batch ETL and ad-hoc analytics", ("svc-analytics-*",), ("analytics-*",)),
    "search": ("Indexing and query serving", ("svc-search-*",), ("search-*",)),
}

#: The quotas of every demo cluster (per broker, as Kafka applies them): (entity, key, value).
#: Levels are Kafka's precedence (1 = /users/u/clients/c ... 8 = /clients/<default>).
QUOTAS: tuple[tuple[tuple[tuple[str, str], ...], str, float], ...] = (
    ((("user", DEFAULT),), "producer_byte_rate", 2 * MIB),  # level 6: every principal without its own
    ((("user", DEFAULT),), "consumer_byte_rate", 4 * MIB),
    ((("user", DEFAULT),), "controller_mutation_rate", 5.0),
    ((("user", "svc-payments-api"),), "producer_byte_rate", 512 * KIB),  # level 3: throttled in its bursts
    ((("user", "svc-search-indexer"),), "controller_mutation_rate", 3.0),  # level 3: strict topic bursts
    ((("user", "svc-analytics-etl"), ("client-id", "analytics-spark")), "consumer_byte_rate", 2 * MIB),  # level 1
    ((("client-id", DEFAULT),), "request_percentage", 50.0),  # level 8
    ((("client-id", "search-query"),), "request_percentage", 20.0),  # level 7: its heavy requests are throttled
    ((("ip", DEFAULT),), "connection_creation_rate", 50),
    ((("ip", STORM_IP),), "connection_creation_rate", 10),  # the IP of the reconnect storm
)

#: Cluster-wide budgets (a budget for the sum over the brokers, shared out by demand): (entity, key, value). The
#: ledger producer moves between its topic's three partition leaders every 20 s (traffic.kafka_clients).
BUDGETS: tuple[tuple[tuple[tuple[str, str], ...], str, float], ...] = (
    ((("user", "svc-payments-ledger"),), "producer_byte_rate", 1 * MIB),
)

#: Group quotas of the Kafka prod (the brokers' quota callback enforces them): name -> (tenant, key, value, scope).
#: analytics' loader produces 256 KiB/s; its tenant's principals together get 192 KiB/s over the whole cluster.
GROUPS: dict[str, tuple[str, str, float, str]] = {
    "analytics": ("analytics", "producer_byte_rate", 192 * KIB, BudgetScope.CLUSTER_WIDE),
}

#: Broker configs: broker id (None = every broker, Kafka's <default>) -> key -> value.
BROKER_CONFIGS: dict[int | None, dict[str, str]] = {
    None: {
        "max.connections": "1000",
        "max.connections.per.ip": "50",
        "max.connection.creation.rate": "200",
        "listener.name.PLAINTEXT.max.connection.creation.rate": "150",
    },
    3: {"max.connections": "800"},  # a smaller box
}

PENDING_REASON = "[demo] Checkout peaks every minute and we are throttled at 512 KiB/s per broker."
PENDING = {"cluster": "prod", "tenant": "payments", "requester": "demo-payments", "user": "svc-payments-api",
           "client_id": None, "key": "producer_byte_rate", "value": 1.5 * MIB}
BOOST_REASON = "[demo] Backfill of the quarter's reports: an hour at 6 MiB/s per broker."
BOOST = {"cluster": "prod", "tenant": "analytics", "requester": "demo-analytics", "user": "svc-analytics-etl",
         "client_id": "analytics-spark", "key": "consumer_byte_rate", "value": 6 * MIB}
LIVE_BOOST_STATES = (RequestState.SUBMITTED, RequestState.APPROVED, RequestState.APPLYING, RequestState.APPLIED)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _path(entity: tuple[tuple[str, str], ...]) -> str:
    return "/config/" + "/".join(f"{'clients' if t == 'client-id' else t + 's'}/{n}" for t, n in entity)


class Command(BaseCommand):
    help = "Create the demo clusters, tenants, logins, quotas, broker configs and requests (only what is missing)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--boost-minutes", type=float, default=60.0, help="How long the demo boost lasts.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.done: list[str] = []
        with transaction.atomic():
            users = self._users()
            clusters = {name: self._cluster(name, spec) for name, spec in CLUSTERS.items()}
            self._tenants(users)
            for cluster in clusters.values():
                self._quotas(cluster, users["demo-admin"])
                self._broker_configs(cluster, users["demo-admin"])
            if clusters[KAFKA_CLUSTER].connector == ConnectorKind.KAFKA:
                self._principals(clusters[KAFKA_CLUSTER])
                self._subscription(clusters[KAFKA_CLUSTER], users["demo-admin"])
                self._groups(clusters[KAFKA_CLUSTER], users["demo-admin"])
            self._pending_request(clusters, users)
            self._boost(clusters, users, options["boost_minutes"])
            pushes: list[str] = []
            transaction.on_commit(lambda: pushes.extend(self._after_commit(list(clusters.values()))))
        if self.done:
            self.stdout.write(f"Demo data: {len(self.done)} change(s):")
            for line in self.done:
                self.stdout.write(f"  - {line}")
        else:
            self.stdout.write("Demo data already in place: nothing changed.")
        for line in pushes:
            self.stdout.write(line)
        self.stdout.write("")
        self.stdout.write(logins_text())

    # ---- people

    def _users(self) -> dict[str, Any]:
        model = get_user_model()
        users = {}
        for username, (_role, staff, superuser, groups, _tenant) in USERS.items():
            user, created = model.objects.get_or_create(username=username)
            if created:
                self.done.append(f"user {username}")
            fixed = []
            if (user.is_staff, user.is_superuser, user.is_active) != (staff, superuser, True):
                user.is_staff, user.is_superuser, user.is_active = staff, superuser, True
                fixed.append("role")
            if created or not user.check_password(DEMO_PASSWORD):
                user.set_password(DEMO_PASSWORD)
                fixed.append("password")
            if not user.email:  # notifications are mailed (the demo's worker prints them: console backend)
                user.email = f"{username}@example.com"
                fixed.append("email")
            if fixed:
                user.save()
                if not created:
                    self.done.append(f"user {username}: {' and '.join(fixed)} reset for the demo")
            for name in groups:
                group, _ = Group.objects.get_or_create(name=name)
                if not user.groups.filter(pk=group.pk).exists():
                    user.groups.add(group)
                    if not created:
                        self.done.append(f"user {username} added to group {name}")
            users[username] = user
        return users

    def _tenants(self, users: dict[str, Any]) -> None:
        for name, (description, principals, client_ids) in TENANTS.items():
            tenant, created = Tenant.objects.get_or_create(name=name, defaults={"description": description})
            if created:
                self.done.append(f"tenant {name}")
            for username, (*_rest, member_of) in USERS.items():
                if member_of == name and not tenant.members.filter(pk=users[username].pk).exists():
                    tenant.members.add(users[username])
                    self.done.append(f"tenant {name}: member {username}")
            for entity_type, patterns in (("user", principals), ("client-id", client_ids)):
                for pattern in patterns:
                    owned = OwnedName.objects.filter(entity_type=entity_type, pattern=pattern).first()
                    if owned is None:
                        OwnedName.objects.create(tenant=tenant, entity_type=entity_type, pattern=pattern)
                        self.done.append(f"tenant {name}: owns {entity_type} {pattern}")
                    elif owned.tenant_id != tenant.pk:
                        self.stderr.write(f"{entity_type} pattern {pattern} belongs to tenant {owned.tenant}; left so")

    # ---- clusters

    def _cluster(self, name: str, spec: dict[str, Any]) -> Cluster:
        kafka = kafka_settings() if name == KAFKA_CLUSTER else None
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            cluster = Cluster.objects.create(
                name=name, connector=ConnectorKind.ENGINE, scope=QuotaScope.PER_BROKER, **spec
            )
            self.done.append(f"cluster {name}")
        if kafka is not None:
            return self._kafka_cluster(cluster, kafka)
        if cluster.connector != ConnectorKind.ENGINE:
            self.stderr.write(f"cluster {name} exists with the {cluster.connector} connector; the load needs engine")
        for listener, inter in LISTENERS:
            if not Listener.objects.filter(cluster=cluster, name=listener).exists():
                taken = Listener.objects.filter(cluster=cluster, is_inter_broker=True).exists()
                Listener.objects.create(cluster=cluster, name=listener, is_inter_broker=inter and not taken)
                self.done.append(f"cluster {name}: listener {listener}")
        for broker_id in BROKER_IDS:
            if not Broker.objects.filter(cluster=cluster, broker_id=broker_id).exists():
                # engine_url empty: a namespace of the portal's own Redis; saving it queues its first push
                Broker.objects.create(cluster=cluster, broker_id=broker_id, host=f"{name}-broker-{broker_id}:9092")
                self.done.append(f"cluster {name}: broker {broker_id}")
        return cluster

    def _kafka_cluster(self, cluster: Cluster, kafka: dict[str, str]) -> Cluster:
        """``prod`` on the real Kafka cluster: its SASL bootstrap servers and user, its brokers as the metadata
        names them (an engine ``prod`` of an earlier demo is switched over: desired state stays, pushes go to
        Kafka from now on)."""
        changed = [f for f, v in kafka.items() if getattr(cluster, f) != v]
        if cluster.connector != ConnectorKind.KAFKA:
            changed.append("connector")
            cluster.connector = ConnectorKind.KAFKA
        for f, v in kafka.items():
            setattr(cluster, f, v)
        if changed:
            cluster.save()
            self.done.append(f"cluster {cluster.name}: the real Kafka cluster at {cluster.bootstrap_servers}")
        with _admin(cluster) as client:
            addresses = client.describe_cluster().addresses
        for broker_id, address in addresses.items():
            broker, created = Broker.objects.get_or_create(cluster=cluster, broker_id=broker_id,
                                                           defaults={"host": address})
            if broker.host != address:
                broker.host = address
                broker.save(update_fields=["host"])
            if created:
                self.done.append(f"cluster {cluster.name}: broker {broker_id} at {address}")
        return cluster

    def _principals(self, cluster: Cluster) -> None:
        """SCRAM credentials of the demo principals that run real clients (a demo's passwords, ``demo_password``)."""
        users = sorted({spec.user for spec in DEMO_KAFKA_TRAFFIC})
        with _admin(cluster) as client:
            have = set(client.describe_user_scram_credentials(None))
            missing = [u for u in users if u not in have]
            if missing:
                client.alter_user_scram_credentials([(u, MECHANISM, 8192, demo_password(u)) for u in missing])
                self.done += [f"{cluster.name}: SCRAM credentials of {u}" for u in missing]

    def _subscription(self, cluster: Cluster, admin: Any) -> None:
        """A KIP-714 subscription to the producers' metrics: the demo's clients push them through the brokers' exporter
        to the portal, and a preview of a throttled producer estimates what it asked for from its queue time."""
        if ClientMetricsSubscription.objects.filter(cluster=cluster, name=SUBSCRIPTION).exists():
            return
        alter_subscription(cluster, SUBSCRIPTION, SUBSCRIPTION_CONFIGS, admin, create_only=True,
                           audit={"comment": "demo data"})
        self.done.append(f"{cluster.name}: client-metrics subscription {SUBSCRIPTION} "
                         f"({SUBSCRIPTION_CONFIGS['metrics']} every {SUBSCRIPTION_CONFIGS['interval.ms']} ms)")

    def _groups(self, cluster: Cluster, admin: Any) -> None:
        """The demo's group quotas, and the portal's own Kafka user exempt from every quota (as Kafka's brokers are)."""
        for name, (tenant, key, value, scope) in GROUPS.items():
            group = QuotaGroup.objects.filter(cluster=cluster, name=name).first()
            if group is None:
                group = create_group(admin, cluster, Tenant.objects.get(name=tenant), name, GroupKind.TENANT,
                                     description="[demo] the tenant's principals together")
                set_group_values(admin, group, {key: (value, scope)}, comment="demo data")
                self.done.append(f"{cluster.name}: group {name} (tenant {tenant}'s principals) {key}={_num(value)}"
                                 " (cluster-wide)")
        if cluster.sasl_username and set_exempt(admin, cluster, cluster.sasl_username, True,
                                                "the portal's own admin user"):
            self.done.append(f"{cluster.name}: {cluster.sasl_username} exempt from every quota")

    def _quotas(self, cluster: Cluster, admin: Any) -> None:
        """Every demo quota that has no value yet, in one AlterClientQuotas batch (one version, audited)."""
        entries = []
        wanted = [(e, k, v, None) for e, k, v in QUOTAS] + [(e, k, v, BudgetScope.CLUSTER_WIDE) for e, k, v in BUDGETS]
        for entity, key, value, scope in wanted:
            names = dict(entity)
            exists = QuotaValue.objects.filter(
                entity__cluster=cluster, entity__user=names.get("user"), entity__client_id=names.get("client-id"),
                entity__ip=names.get("ip"), key=key,
            ).exists()
            if not exists:
                entries.append(Alteration(list(entity), [QuotaOp(key, value, scope=scope)]))
                wide = " (cluster-wide)" if scope else ""
                self.done.append(f"{cluster.name}: quota {_path(entity)} {key}={_num(value)}{wide}")
        if entries:
            audited_alter(cluster, entries, admin, comment="demo data")

    def _broker_configs(self, cluster: Cluster, admin: Any) -> None:
        for broker_id, configs in BROKER_CONFIGS.items():
            if cluster.connector == ConnectorKind.KAFKA and broker_id is None:
                # the real clients all connect from 127.0.0.1, some to every broker: room for them per IP
                configs = {**configs, "max.connections.per.ip": "200"}
            broker = Broker.objects.get(cluster=cluster, broker_id=broker_id) if broker_id is not None else None
            have = set(BrokerConfig.objects.filter(cluster=cluster, broker=broker).values_list("key", flat=True))
            ops = [ConfigOp(key, value) for key, value in configs.items() if key not in have]
            if ops:
                alter_configs(cluster, ConfigResource(broker_id=broker_id), ops, admin)
                where = "<default>" if broker_id is None else broker_id
                self.done += [f"{cluster.name}: /config/brokers/{where} {op.key}={op.value}" for op in ops]

    # ---- requests

    def _submit(self, spec: dict[str, Any], clusters: dict[str, Cluster], users: dict[str, Any], reason: str,
                expires_at: Any = None) -> QuotaRequest:
        return quota_requests.submit(
            users[spec["requester"]], Tenant.objects.get(name=spec["tenant"]), clusters[spec["cluster"]],
            user=spec["user"], client_id=spec["client_id"], key=spec["key"], value=spec["value"], reason=reason,
            expires_at=expires_at,
        )

    def _pending_request(self, clusters: dict[str, Cluster], users: dict[str, Any]) -> None:
        """Made once: once someone decided it in the demo, it stays decided."""
        if QuotaRequest.objects.filter(cluster=clusters[PENDING["cluster"]], reason=PENDING_REASON).exists():
            return
        request = self._submit(PENDING, clusters, users, PENDING_REASON)
        self.done.append(f"request #{request.pk} (pending): {request.entity} {request.key}={_num(request.value)}")

    def _boost(self, clusters: dict[str, Cluster], users: dict[str, Any], minutes: float) -> None:
        """A live boost: made when there is none (the first run, or the last one has expired)."""
        mine = QuotaRequest.objects.filter(cluster=clusters[BOOST["cluster"]], reason=BOOST_REASON)
        if mine.filter(state__in=LIVE_BOOST_STATES).exists():
            return
        request = self._submit(BOOST, clusters, users, BOOST_REASON, timezone.now() + timedelta(minutes=minutes))
        quota_requests.approve(users["demo-admin"], request.pk, comment="[demo] approved for the backfill")
        request.refresh_from_db()
        self.done.append(
            f"boost #{request.pk} (approved, {request.state}, until {request.expires_at:%H:%M} UTC): "
            f"{request.entity} {request.key}={_num(request.value)}"
        )

    # ---- pushes

    def _after_commit(self, clusters: list[Cluster]) -> list[str]:
        """The commit's own pushes (direct, in threads of this process) end before the command does: cut off at the
        interpreter's exit, they printed a traceback under the demo logins. Then the rest catches up."""
        from quotas.push.dispatch import wait_direct_pushes

        try:
            wait_direct_pushes()
        except TimeoutError:
            self.stderr.write("A push to a cluster is still running: the Celery worker finishes it.")
        return self._catch_up(clusters)

    def _catch_up(self, clusters: list[Cluster]) -> list[str]:
        """After the commit: make sure a push is on its way to every broker not at its cluster's newest version."""
        from quotas.connector_registry import connector_for
        from quotas.connectors.base import PushError
        from quotas.models.desired import portal_applied_version
        from quotas.push.address import target_of
        from quotas.push.dispatch import enqueue_pushes

        lines = []
        for cluster in clusters:
            version = DesiredStateVersion.objects.get(cluster=cluster).version
            if cluster.connector == ConnectorKind.KAFKA:  # one target: the cluster's metadata
                if portal_applied_version(cluster, None) < version:
                    enqueue_pushes(cluster.pk, [None])
                    lines.append(f"{cluster.name}: the Kafka cluster is not yet at desired-state version {version}: "
                                 "a push is queued for the Celery worker")
                continue
            connector = connector_for(cluster.connector)
            behind = []
            for broker in Broker.objects.filter(cluster=cluster).order_by("broker_id"):
                try:
                    held = connector.applied_version(target_of(cluster, broker))
                except PushError as e:
                    self.stderr.write(f"{cluster.name}/broker-{broker.broker_id}: {e.message}")
                    continue
                if held is None or held < version:
                    behind.append(broker.pk)
            if behind:
                enqueue_pushes(cluster.pk, behind)  # a broker with a push already pending gets no second one
                lines.append(
                    f"{cluster.name}: {len(behind)} of {len(BROKER_IDS)} brokers not yet at desired-state version "
                    f"{version}: pushes queued for the Celery worker"
                )
        return lines


def kafka_settings() -> dict[str, str] | None:
    """The Kafka settings of the demo's ``prod`` from the environment (scripts/run_portal.sh), or None: engine."""
    bootstrap = os.environ.get(KAFKA_ENV, "").strip()
    if not bootstrap:
        return None
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_username": os.environ.get(KAFKA_USER_ENV, "portal-admin"),
    }


def _admin(cluster: Cluster) -> Any:
    """The portal's admin client to a Kafka cluster, as its pushes connect."""
    from kafka_wire import AdminClient
    from quotas.push.address import kafka_credentials

    creds = kafka_credentials(cluster)
    return AdminClient(cluster.bootstrap_servers, security_protocol=creds.security_protocol,
                       sasl_mechanism=creds.sasl_mechanism, sasl_username=creds.username, sasl_password=creds.password)


def logins_text() -> str:
    lines = [f"Demo logins (password for all: {DEMO_PASSWORD}):"]
    width = max(len(u) for u in USERS)
    for username, (role, *_rest) in USERS.items():
        lines.append(f"  {username.ljust(width)}  {DEMO_PASSWORD}   {role}")
    return "\n".join(lines)
