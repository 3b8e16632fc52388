"""SASL/SCRAM credentials of the principals tenants own, made, rotated and deleted on a Kafka cluster.

Why this layer: like the push it talks to Kafka (Describe/AlterUserScramCredentials through the connector's
``AdminClient``, with the portal's own credentials for the cluster, ``quotas.push.address.kafka_credentials``), but at
once and in the caller's request, because the new password has to go back to the person who asked, once.

The password is always generated here (``secrets.token_urlsafe(24)``, 192 random bits; never taken from the
person, so no weak one can exist), sent to Kafka only salted (the client computes ``Hi(password, salt, i)``),
returned once in ``Issued`` and never stored, logged, audited or put into an exception. Kafka holds the
credentials; a ``ScramCredential`` row records which mechanism of which principal the portal set, for which
tenant, by whom and when, and every change is audited without the secret.

Who may: a member of a tenant owning the user name (``Tenant.owns``, the rule of quota requests); admins any
name; auditors and people without a tenant nothing. Refusals and Kafka's errors are ``ScramError`` (a
``WorkflowError``), so the API and the pages show them with their code (Kafka's name when Kafka refused:
UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND, ...) and status.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from engine.entities import DEFAULT, entity_path
from kafka_wire import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    AdminClient,
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ScramCredentialError,
)
from quotas.choices import ConnectorKind
from quotas.connectors.base import PushError
from quotas.models import (
    AuditAction,
    Cluster,
    ScramCredential,
    Tenant,
    is_admin,
    is_auditor,
    member_tenants,
    owned_by_any,
    owning_tenant,
    record,
    sees_everything,
)
from quotas.push import address, flags
from quotas.workflow import errors

log = logging.getLogger(__name__)

MECHANISMS: tuple[str, ...] = tuple(SCRAM_MECHANISMS)  # SCRAM-SHA-256, SCRAM-SHA-512
DEFAULT_ITERATIONS = 8192
MIN_ITERATIONS, MAX_ITERATIONS = SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS
USER_MAX = 255
#: How long a create or delete waits for every broker to answer the change from its own metadata (best effort:
#: a login at a broker that has not applied it yet would fail, so the password is handed out once they have).
PROPAGATION_S = 10.0
REQUEST_TIMEOUT_S = 15.0
#: A principal's change holds a lock this long at most; another change of it waits up to LOCK_WAIT_S.
LOCK_S, LOCK_WAIT_S = 120.0, 20.0
NOT_SHOWN_AGAIN = "Copy the password now: it is shown once and stored nowhere, not even by the portal."


class ScramError(errors.WorkflowError):
    """A refused or failed credential change, with the API's code (Kafka's error name when Kafka refused)."""

    def __init__(self, code: str, message: str, status: int = 400, field: str | None = None) -> None:
        super().__init__(message, field)
        self.code = code
        self.status = status


@dataclass(frozen=True)
class Issued:
    """A new password and the credentials it now opens; the caller shows it once (no repr shows it)."""

    cluster: str
    user: str
    password: str = field(repr=False)
    credentials: list[ScramCredential]
    tenant: Tenant | None


def new_password() -> str:
    """192 random bits, URL-safe (32 characters): what every credential the portal makes gets."""
    return secrets.token_urlsafe(24)


# ------------------------------------------------------------------ who may see and change what


def visible(actor: AbstractBaseUser, cluster: Cluster) -> QuerySet[ScramCredential]:
    """The cluster's credential rows the actor may see: admins and auditors all, a member those of the principals
    its tenants own now (by pattern, which SQL cannot match portably: decided here, then filtered by key)."""
    rows = ScramCredential.objects.filter(cluster=cluster).select_related("cluster", "tenant")
    if sees_everything(actor):
        return rows
    tenants = member_tenants(actor)
    mine = [pk for pk, user in rows.values_list("pk", "user") if tenants and owned_by_any(tenants, user, None)]
    return rows.filter(pk__in=mine)


def manageable_tenant(actor: AbstractBaseUser, user: str) -> Tenant | None:
    """The tenant a change of ``user``'s credentials is for; raises PERMISSION_DENIED when the actor may not.

    A member: its tenant owning the name (the first by name when several do). An admin: the one tenant owning it,
    or None. Auditors change nothing.
    """
    if is_auditor(actor):
        raise ScramError(
            "PERMISSION_DENIED", "Auditors read everything and change nothing; use an admin or member account.", 403
        )
    if is_admin(actor):
        return owning_tenant(user, None)
    tenants = member_tenants(actor)
    if not tenants:
        raise ScramError(
            "PERMISSION_DENIED",
            "You are not a member of any tenant; an admin adds you to your team's tenant (/api/tenants/).",
            403,
        )
    owners = sorted((t for t in tenants if owned_by_any([t], user, None)), key=lambda t: t.name)
    if not owners:
        names = ", ".join(sorted(t.name for t in tenants))
        raise ScramError(
            "PERMISSION_DENIED",
            f"None of your tenants ({names}) owns the principal {user!r}; ask an admin to add it to your tenant.",
            403,
            "user",
        )
    return owners[0]


def _check_user(user: str) -> None:
    if not user or user != user.strip() or len(user) > USER_MAX:
        raise ScramError("INVALID_REQUEST", f"Name a user principal (1..{USER_MAX} characters, no outer spaces).",
                         field="user")
    if user == DEFAULT:
        raise ScramError("INVALID_REQUEST", f"{DEFAULT} is the default quota entity, not a user who can log in.",
                         field="user")


def _check_mechanisms(mechanisms: Sequence[str] | None) -> tuple[str, ...] | None:
    if mechanisms is None:
        return None
    chosen = tuple(dict.fromkeys(m.strip().upper() for m in mechanisms))
    unknown = [m for m in chosen if m not in MECHANISMS]
    if unknown or not chosen:
        raise ScramError("INVALID_REQUEST", f"Mechanisms are {' and/or '.join(MECHANISMS)}, not {unknown or 'none'}.",
                         field="mechanisms")
    return chosen


def _check_iterations(iterations: int | None) -> None:
    if iterations is not None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(
            "UNACCEPTABLE_CREDENTIAL",
            f"Iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's bounds), not {iterations}.",
            field="iterations",
        )


# ------------------------------------------------------------------ Kafka


def require_kafka(cluster: Cluster) -> None:
    """INVALID_REQUEST unless the cluster is a Kafka cluster: SCRAM means nothing to the engine. Checked after who
    may act (403 first) and before any lock or connection is tried (an engine cluster's brokers are no Kafka
    brokers to reach)."""
    if cluster.connector != ConnectorKind.KAFKA:
        raise ScramError(
            "INVALID_REQUEST",
            f"Cluster {cluster.name!r} is an engine cluster: SCRAM credentials need a Kafka cluster (connector kafka), "
            "whose brokers authenticate clients.",
        )


def _kafka_error(error: KafkaClientError, cluster: Cluster) -> ScramError:
    """Kafka's answer as a typed error: its name and message, 404 for what is not there, 503 when trying again may
    help, 502 when the portal cannot talk to the cluster, else 400 (Kafka refused the change itself).

    A connection that failed or timed out is said without the addresses tried: they are the cluster's internal
    ones, and whoever manages a principal's credentials need not learn them (the portal's log has them)."""
    if isinstance(error, KafkaConnectionError | KafkaTimeoutError):
        log.warning("SCRAM change on %s: Kafka did not answer: %s", cluster.name, error)
        return ScramError(
            error.code,
            f"Kafka cluster {cluster.name!r} did not answer ({error.code}); try again, or ask an admin to check its "
            "brokers and bootstrap servers.",
            503,
        )
    if error.code == "RESOURCE_NOT_FOUND":
        status = 404
    elif error.retriable:
        status = 503
    elif isinstance(error, ScramCredentialError) or (isinstance(error, KafkaBrokerError) and error.code not in (
        "SASL_AUTHENTICATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "UNSUPPORTED_VERSION"
    )):
        status = 400
    else:
        status = 502
    return ScramError(error.code, f"Kafka: {error.message}", status)


@contextmanager
def kafka_admin(cluster: Cluster) -> Iterator[AdminClient]:
    """An Admin client to the cluster with the portal's credentials; Kafka's failures become ``ScramError``."""
    require_kafka(cluster)
    try:
        creds = address.kafka_credentials(cluster)
        sasl = {} if creds.security_protocol == "PLAINTEXT" else {
            "security_protocol": creds.security_protocol,
            "sasl_mechanism": creds.sasl_mechanism,
            "sasl_username": creds.username,
            "sasl_password": creds.password,
        }
        client = AdminClient(address.kafka_bootstrap(cluster), request_timeout=REQUEST_TIMEOUT_S, **sasl)
    except PushError as e:
        raise ScramError(e.code, e.message, 502) from None
    except ValueError as e:
        raise ScramError("INVALID_REQUEST", f"Cluster {cluster.name!r}: {e}") from None
    try:
        yield client
    except KafkaClientError as e:
        raise _kafka_error(e, cluster) from None
    finally:
        client.close()


@contextmanager
def changing(cluster: Cluster, user: str) -> Iterator[None]:
    """One change of a principal's credentials at a time (Redis lock): Kafka would take two creates of one principal
    in any order, and the first person's password, already shown, would not work."""
    lock = flags.portal_lock(f"scram-lock:{cluster.pk}:{user}", LOCK_S, LOCK_WAIT_S)
    try:
        acquired = lock.acquire()
    except redis.exceptions.RedisError as e:
        raise ScramError("UNKNOWN_SERVER_ERROR", f"The portal's Redis is unreachable: {e}", 503) from None
    if not acquired:
        raise ScramError(
            "CONCURRENT_TRANSACTIONS", f"Another change of {user!r}'s credentials is under way; try again.", 409
        )
    try:
        yield
    finally:
        try:
            lock.release()
        except redis.exceptions.RedisError:  # expired meanwhile, or Redis went away: it expires on its own
            log.warning("the SCRAM lock of %r on %s was gone at release", user, cluster.name)


def described(client: AdminClient, user: str) -> dict[str, int]:
    """The user's credentials on Kafka: mechanism -> iterations ({} when it has none)."""
    try:
        return dict(client.describe_user_scram_credentials([user]).get(user, []))
    except ScramCredentialError as e:
        if e.code == "RESOURCE_NOT_FOUND":
            return {}
        raise


def _await_brokers(client: AdminClient, user: str, want: set[str], gone: set[str]) -> None:
    """Wait (best effort, ``PROPAGATION_S``) until every broker answers ``want`` present and ``gone`` absent from its
    own metadata, so that a password handed out works at whichever broker a client reaches first."""
    deadline = time.monotonic() + PROPAGATION_S
    try:
        brokers = client.broker_clients()
    except KafkaClientError:
        return
    try:
        for broker in brokers.values():
            while True:
                try:
                    have = set(described(broker, user))
                except KafkaClientError:
                    break
                if (want <= have and not (gone & have)) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
    finally:
        for broker in brokers.values():
            broker.close()


# ------------------------------------------------------------------ create, rotate, delete


def _audit(action: str, actor: AbstractBaseUser, cluster: Cluster, tenant: Tenant | None, user: str, mechanism: str,
           before: int | None, after: int | None) -> None:
    """One audit entry per mechanism: the iterations before and after (null = none), never a secret."""
    record(
        action,
        actor,
        tenant=tenant,
        cluster=cluster,
        entity=entity_path(user, None, None),
        key=mechanism,
        before=None if before is None else {"iterations": before},
        after=None if after is None else {"iterations": after},
        comment=AuditAction(action).label,
    )


@sensitive_variables("password")
def create(
    actor: AbstractBaseUser,
    cluster: Cluster,
    user: str,
    mechanisms: Sequence[str] | None = None,
    iterations: int | None = None,
) -> Issued:
    """New credentials (default: both mechanisms, 8192 iterations) with one new password for a principal that has
    none of them on Kafka yet (CONFLICT otherwise: rotate or delete them). All or nothing: a mechanism Kafka set
    before it refused the next is removed again."""
    _check_user(user)
    chosen = _check_mechanisms(mechanisms) or MECHANISMS
    iterations = DEFAULT_ITERATIONS if iterations is None else iterations
    _check_iterations(iterations)
    tenant = manageable_tenant(actor, user)
    require_kafka(cluster)  # after who may: one who may not is told so, whatever the cluster
    password = new_password()
    with changing(cluster, user), kafka_admin(cluster) as client:
        existing = described(client, user)
        clash = [m for m in chosen if m in existing]
        if clash:
            raise ScramError(
                "CONFLICT",
                f"{user!r} already has {' and '.join(clash)} credentials on {cluster.name}; rotate them for a new "
                "password, or delete them first.",
                409,
            )
        done: list[str] = []
        try:
            for mechanism in chosen:  # one at a time: what was set is known when one is refused
                client.alter_user_scram_credentials([(user, mechanism, iterations, password)])
                done.append(mechanism)
        except KafkaClientError:
            if done:
                try:
                    client.alter_user_scram_credentials(deletions=[(user, m) for m in done])
                except KafkaClientError:
                    log.warning("could not remove the half-made SCRAM credentials %s of %r on %s", done, user,
                                cluster.name)
            raise
        _await_brokers(client, user, set(chosen), set())
    now = timezone.now()
    with transaction.atomic():
        rows = []
        for mechanism in chosen:
            row, _ = ScramCredential.objects.update_or_create(  # a row left by a credential deleted behind our back
                cluster=cluster, user=user, mechanism=mechanism,
                defaults={"iterations": iterations, "tenant": tenant, "created": now, "created_by": actor,
                          "created_by_name": actor.get_username(), "rotated": None, "rotated_by": None,
                          "rotated_by_name": ""},
            )
            rows.append(row)
            _audit(AuditAction.SCRAM_CREATED, actor, cluster, tenant, user, mechanism, None, iterations)
    log.info("SCRAM credentials %s of %r created on %s by %s", list(chosen), user, cluster.name, actor.get_username())
    return Issued(cluster.name, user, password, rows, tenant)


@sensitive_variables("password")
def rotate(
    actor: AbstractBaseUser,
    cluster: Cluster,
    user: str,
    mechanisms: Sequence[str] | None = None,
    iterations: int | None = None,
) -> Issued:
    """A new password for the principal's credentials on Kafka (all it has, or the mechanisms named), each keeping
    its iterations unless given. A credential made outside the portal is taken over (a row is made for it).
    RESOURCE_NOT_FOUND when there is nothing to rotate."""
    _check_user(user)
    chosen = _check_mechanisms(mechanisms)
    _check_iterations(iterations)
    tenant = manageable_tenant(actor, user)
    require_kafka(cluster)  # after who may: one who may not is told so, whatever the cluster
    password = new_password()
    failure: ScramError | None = None
    done: list[tuple[str, int, int]] = []  # (mechanism, iterations before, after)
    with changing(cluster, user), kafka_admin(cluster) as client:
        existing = described(client, user)
        targets = chosen or tuple(m for m in MECHANISMS if m in existing)
        missing = [m for m in targets if m not in existing]
        if not targets or missing:
            what = " and ".join(missing) + " credentials" if missing else "SCRAM credentials"
            raise ScramError("RESOURCE_NOT_FOUND", f"{user!r} has no {what} on {cluster.name} to rotate; create them.",
                             404)
        for mechanism in targets:
            after = iterations or existing[mechanism]
            try:
                client.alter_user_scram_credentials([(user, mechanism, after, password)])
            except KafkaClientError as e:
                failure = _kafka_error(e, cluster)
                break
            done.append((mechanism, existing[mechanism], after))
    now = timezone.now()
    rows = []
    with transaction.atomic():
        for mechanism, before, after in done:
            row = ScramCredential.objects.filter(cluster=cluster, user=user, mechanism=mechanism).first()
            if row is None:
                row = ScramCredential(cluster=cluster, user=user, mechanism=mechanism, tenant=tenant, created=now,
                                      created_by=actor, created_by_name=actor.get_username())
            row.iterations, row.rotated, row.rotated_by, row.rotated_by_name = after, now, actor, actor.get_username()
            row.tenant = row.tenant or tenant
            row.save()
            rows.append(row)
            _audit(AuditAction.SCRAM_ROTATED, actor, cluster, tenant, user, mechanism, before, after)
    if failure is not None:
        if done:  # the password of the rotated ones is not handed out with an error: rotating again gives a new one
            failure.message += (f" ({', '.join(m for m, _, _ in done)} was rotated before this; rotate again for one "
                                "password that opens all of them.)")
            failure.args = (failure.message,)
        raise failure
    log.info("SCRAM credentials %s of %r rotated on %s by %s", [m for m, _, _ in done], user, cluster.name,
             actor.get_username())
    return Issued(cluster.name, user, password, rows, tenant)


def delete(actor: AbstractBaseUser, cluster: Cluster, user: str, mechanisms: Sequence[str] | None = None) -> list[str]:
    """Remove the principal's credentials (all, or the mechanisms named) from Kafka and their rows; returns the
    mechanisms removed. RESOURCE_NOT_FOUND when neither Kafka nor the portal knows any of them."""
    _check_user(user)
    chosen = _check_mechanisms(mechanisms)
    tenant = manageable_tenant(actor, user)
    require_kafka(cluster)  # after who may: one who may not is told so, whatever the cluster
    with changing(cluster, user), kafka_admin(cluster) as client:
        rows = {r.mechanism: r for r in ScramCredential.objects.filter(cluster=cluster, user=user)}
        existing = described(client, user)
        targets = chosen or tuple(m for m in MECHANISMS if m in existing or m in rows)
        unknown = [m for m in targets if m not in existing and m not in rows]
        if not targets or unknown:
            what = " and ".join(unknown) + " credentials" if unknown else "SCRAM credentials"
            raise ScramError("RESOURCE_NOT_FOUND", f"{user!r} has no {what} on {cluster.name}.", 404)
        on_kafka = [m for m in targets if m in existing]
        if on_kafka:
            client.alter_user_scram_credentials(deletions=[(user, m) for m in on_kafka])
            _await_brokers(client, user, set(), set(on_kafka))
    with transaction.atomic():
        for mechanism in targets:
            row = rows.get(mechanism)
            before = existing.get(mechanism) or (row.iterations if row is not None else None)
            if row is not None:
                row.delete()
            _audit(AuditAction.SCRAM_DELETED, actor, cluster, tenant, user, mechanism, before, None)
    log.info("SCRAM credentials %s of %r deleted on %s by %s", list(targets), user, cluster.name, actor.get_username())
    return list(targets)
