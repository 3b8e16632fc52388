"""The portal's own Kafka Admin client (kafka_wire.AdminClient) against the real Kafka 4.4 cluster.

SCRAM logins on the SASL_PLAINTEXT listener (and a refused password that shows up nowhere), failover along a
bootstrap list, DescribeCluster, the SCRAM credential lifecycle of a user (create, describe, log in, rotate,
delete) with Kafka's own limits, and CreateTopics / DeleteTopics. Names are unique per run, so the tests share
the session's cluster (fixture ``kafka_cluster``) safely. A few cases Kafka cannot be made to produce (a broker
without the mechanism, a broker going down) use the in-suite responder or a tiny fake broker.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.sasl import SaslHandshakeResponse

from devtools.redis_server import free_port
from kafka_wire import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    AdminClient,
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    NewTopic,
    SaslAuthenticationError,
    ScramCredentialError,
    UnsupportedSaslMechanismError,
    parse_addresses,
    scram_salt,
)
from tests.connectors.kafka_responder import KafkaResponder
from tests.waiting import wait_for

SHA256, SHA512 = SCRAM_MECHANISMS  # "SCRAM-SHA-256", "SCRAM-SHA-512"
#: How long a SCRAM change may take to reach every broker (each applies the metadata log on its own).
PROPAGATION_S = 15.0


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _sasl_client(address: str, mechanism: str, username: str, password: str) -> AdminClient:
    return AdminClient(
        address,
        connect_timeout=5.0,
        request_timeout=15.0,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=password,
    )


def _logs_in(address: str, mechanism: str, username: str, password: str) -> bool:
    """Whether ``username`` can log in at ``address`` with ``password`` (other failures raise)."""
    try:
        with _sasl_client(address, mechanism, username, password) as client:
            client.connect()
        return True
    except SaslAuthenticationError:
        return False


def _everywhere(addresses: list[str], mechanism: str, username: str, password: str) -> list[bool]:
    return [_logs_in(a, mechanism, username, password) for a in addresses]


@pytest.fixture(scope="module")
def admin(kafka_cluster: Any) -> Iterator[AdminClient]:
    """A PLAINTEXT client over the whole bootstrap list."""
    with AdminClient(kafka_cluster.bootstrap("PLAINTEXT"), request_timeout=40.0) as client:
        yield client


@pytest.fixture(scope="module")
def sasl_addresses(kafka_cluster: Any) -> list[str]:
    """Every broker's SASL_PLAINTEXT address, as the brokers name them (a login must work at each one)."""
    creds = kafka_cluster.admin_credentials()
    with _sasl_client(kafka_cluster.bootstrap("SASL_PLAINTEXT"), SHA512, creds["username"], creds["password"]) as c:
        return list(c.describe_cluster().addresses.values())


# -- settings that are refused before anything is sent ---------------------------------------------------------


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "sasl_ssl"])
def test_tls_is_refused_as_out_of_scope(protocol: str) -> None:
    with pytest.raises(ValueError, match=r"TLS \(SSL, SASL_SSL\) is out of scope"):
        AdminClient("127.0.0.1:9092", security_protocol=protocol)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security_protocol": "KERBEROS"}, "security_protocol is PLAINTEXT or SASL_PLAINTEXT"),
        ({"sasl_mechanism": SHA256, "sasl_username": "u", "sasl_password": "p"}, "need security_protocol"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": "p"}, "needs sasl_mechanism"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u",
             "sasl_password": "p"},
            "needs sasl_mechanism",
        ),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": SHA256, "sasl_username": "u"}, "sasl_password"),
    ],
)
def test_unusable_security_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AdminClient("127.0.0.1:9092", **settings)


def test_a_bootstrap_list_keeps_its_order_and_refuses_bad_entries() -> None:
    assert parse_addresses(" h1:1, [::1]:2 ,,h3:3") == ("h1:1", "[::1]:2", "h3:3")
    client = AdminClient("h1:1,h2:2")
    assert (client.address, client.addresses, client.connected_address) == ("h1:1,h2:2", ("h1:1", "h2:2"), None)
    for bad in ("", " , ", "h1:1,h2", "h1:1,h2:0"):
        with pytest.raises(ValueError, match="host:port"):
            AdminClient(bad)


def test_a_salt_is_kafkas_kind_of_salt() -> None:
    salts = {scram_salt() for _ in range(20)}
    assert len(salts) == 20  # random
    for salt in salts:  # a 130-bit number in base 36, as UserScramCredentialUpsertion makes it
        assert 0 < len(salt) <= 26 and salt.decode("ascii").isalnum() and salt == salt.lower()
        assert int(salt, 36) < 2**130


# -- SASL/SCRAM logins -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_the_super_user_logs_in_with_scram_and_describes_quotas(kafka_cluster: Any, mechanism: str) -> None:
    creds = kafka_cluster.admin_credentials()
    with _sasl_client(kafka_cluster.bootstrap("SASL_PLAINTEXT"), mechanism, creds["username"], creds["password"]) as c:
        response = c.describe_client_quotas()
        assert response.error_code == 0, response.error_message
        assert c.connected_address in c.addresses
        assert c.api_version(SASL_HANDSHAKE) == 1 and c.api_version(SASL_AUTHENTICATE) >= 1


def test_a_wrong_password_is_refused_and_named_nowhere(kafka_cluster: Any) -> None:
    creds = kafka_cluster.admin_credentials()
    wrong = f"not-the-password-{uuid.uuid4().hex}"
    client = _sasl_client(kafka_cluster.bootstrap("SASL_PLAINTEXT"), SHA256, creds["username"], wrong)
    with pytest.raises(SaslAuthenticationError) as raised:
        client.describe_client_quotas()
    error = raised.value
    assert (error.code, error.retriable) == ("SASL_AUTHENTICATION_FAILED", False)
    assert "invalid credentials" in error.message and creds["username"] in error.message
    assert not client.connected
    texts = [str(error), repr(error), *map(str, error.args), "".join(traceback.format_exception(error))]
    texts += [repr(client), str(client), repr(vars(client))]
    for secret in (wrong, creds["password"]):
        assert not [t for t in texts if secret in t]


def test_the_right_password_is_named_nowhere_either(kafka_cluster: Any) -> None:
    creds = kafka_cluster.admin_credentials()
    with _sasl_client(kafka_cluster.bootstrap("SASL_PLAINTEXT"), SHA512, creds["username"], creds["password"]) as c:
        c.connect()
        for text in (repr(c), str(c), repr(vars(c)), repr(c.for_address(c.addresses[-1]))):
            assert creds["password"] not in text
        assert "SCRAM-SHA-512" in repr(c) and creds["username"] in repr(c)


def test_a_sasl_client_on_a_plaintext_listener_fails_clearly(kafka_cluster: Any) -> None:
    plaintext = kafka_cluster.bootstrap("PLAINTEXT").split(",")[0]
    with pytest.raises(KafkaBrokerError) as raised:
        _sasl_client(plaintext, SHA256, "portal-admin", "whatever").connect()
    assert (raised.value.code, raised.value.retriable) == ("ILLEGAL_SASL_STATE", False)
    assert "is it a SASL listener?" in raised.value.message


class _BrokerWithoutScram:
    """A fake broker whose SASL listener offers only PLAIN: answers ApiVersions and SaslHandshake (Kafka's bytes)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while header := conn.recv(4, socket.MSG_WAITALL):
                payload = conn.recv(struct.unpack(">i", header)[0], socket.MSG_WAITALL)
                api_key, version, correlation_id = struct.unpack_from(">hhi", payload)
                if api_key == API_VERSIONS:
                    v = ApiVersionsResponse.ApiVersion
                    keys = [v(api_key=k, min_version=0, max_version=m) for k, m in ((17, 1), (18, 4), (36, 2))]
                    response: Any = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
                else:
                    response = SaslHandshakeResponse(error_code=33, mechanisms=["PLAIN", "OAUTHBEARER"])
                response.API_VERSION = version
                response.with_header(correlation_id=correlation_id)
                conn.sendall(bytes(response.encode(header=True, framed=True)))

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=2)


def test_a_mechanism_the_broker_does_not_offer_names_the_ones_it_does() -> None:
    broker = _BrokerWithoutScram()
    try:
        with pytest.raises(UnsupportedSaslMechanismError) as raised:
            _sasl_client(broker.address, SHA512, "alice", "secret-pw").connect()
    finally:
        broker.close()
    error = raised.value
    assert (error.code, error.retriable) == ("UNSUPPORTED_SASL_MECHANISM", False)
    assert error.mechanisms == ("PLAIN", "OAUTHBEARER")
    assert "SCRAM-SHA-512" in error.message and "PLAIN, OAUTHBEARER" in error.message


# -- several bootstrap addresses -----------------------------------------------------------------------------------


def test_a_closed_first_address_fails_over_to_the_next(kafka_cluster: Any) -> None:
    live = kafka_cluster.bootstrap("PLAINTEXT").split(",")
    bootstrap = ",".join([f"127.0.0.1:{free_port()}", *live])
    with AdminClient(bootstrap, connect_timeout=2.0) as client:
        assert client.describe_client_quotas().error_code == 0
        assert client.address == bootstrap and client.connected_address == live[0]

    creds = kafka_cluster.admin_credentials()  # the same with a login
    sasl = ",".join([f"127.0.0.1:{free_port()}", *kafka_cluster.bootstrap("SASL_PLAINTEXT").split(",")])
    with _sasl_client(sasl, SHA256, creds["username"], creds["password"]) as client:
        client.connect()
        assert client.connected_address == sasl.split(",")[1]


def test_no_address_answering_is_retriable_and_names_each() -> None:
    closed = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    with pytest.raises(KafkaConnectionError) as raised:
        AdminClient(",".join(closed), connect_timeout=1.0).connect()
    assert raised.value.retriable and all(f"cannot connect to {a}" in raised.value.message for a in closed)


def test_a_broker_going_down_moves_the_client_to_the_next_one() -> None:
    with KafkaResponder() as first, KafkaResponder() as second:
        client = AdminClient(f"{first.address},{second.address}", connect_timeout=1.0, request_timeout=2.0)
        try:
            client.describe_client_quotas()
            assert client.connected_address == first.address
            first.refuse_connections()
            with pytest.raises(KafkaClientError) as raised:  # the request in flight is lost: retriable
                client.describe_client_quotas()
            assert raised.value.retriable
            client.describe_client_quotas()
            assert client.connected_address == second.address
            first.accept_connections()
            client.close()  # a reconnect stays with the broker that works ...
            client.describe_client_quotas()
            assert client.connected_address == second.address
            second.refuse_connections()  # ... and starts after the one that failed, wrapping around
            with pytest.raises(KafkaClientError):
                client.describe_client_quotas()
            client.describe_client_quotas()
            assert client.connected_address == first.address
        finally:
            client.close()


# -- DescribeCluster -------------------------------------------------------------------------------------------------


def test_describe_cluster_lists_the_brokers_and_each_sees_them_all(kafka_cluster: Any, admin: AdminClient) -> None:
    described = admin.describe_cluster()
    assert len(described.brokers) == 3 and described.cluster_id
    assert not any(b.fenced for b in described.brokers.values())
    if kafka_cluster.nodes:  # started here: the ids and PLAINTEXT addresses are known
        assert described.addresses == {n.node_id: n.address("PLAINTEXT") for n in kafka_cluster.nodes}
    clients = admin.broker_clients()
    try:
        for node_id, client in clients.items():
            assert client.address == described.addresses[node_id]
            assert client.describe_cluster().addresses == described.addresses
    finally:
        for client in clients.values():
            client.close()


# -- SCRAM credentials -----------------------------------------------------------------------------------------------


def test_the_scram_credential_lifecycle_of_a_user(admin: AdminClient, sasl_addresses: list[str]) -> None:
    user, old, new = _unique("scram-user"), uuid.uuid4().hex, uuid.uuid4().hex
    assert admin.alter_user_scram_credentials([(user, SHA256, 4096, old), (user, SHA512, 8192, old)]) == [user]

    def described() -> list[tuple[str, int]]:
        try:
            return sorted(admin.describe_user_scram_credentials([user])[user])
        except ScramCredentialError as e:
            return [("missing", e.errno)]

    wait_for("both credentials", lambda: described() == [(SHA256, 4096), (SHA512, 8192)], timeout=PROPAGATION_S)
    assert user in admin.describe_user_scram_credentials(None)  # every user
    for mechanism in (SHA256, SHA512):
        wait_for(f"{mechanism} logins at every broker", lambda m=mechanism: all(
            _everywhere(sasl_addresses, m, user, old)), timeout=PROPAGATION_S)

    admin.alter_user_scram_credentials([(user, SHA256, 4096, new)])  # rotate the SCRAM-SHA-256 password
    wait_for("the new password to work", lambda: all(_everywhere(sasl_addresses, SHA256, user, new)),
             timeout=PROPAGATION_S)
    # Refusals are checked at one broker each: a refused login costs the broker's delay (about 0.3 s).
    assert not _logs_in(sasl_addresses[1], SHA256, user, old)
    assert _logs_in(sasl_addresses[0], SHA512, user, old)  # the other mechanism keeps its own password

    assert admin.alter_user_scram_credentials(deletions=[(user, SHA512)]) == [user]
    wait_for("one credential left", lambda: described() == [(SHA256, 4096)], timeout=PROPAGATION_S)
    wait_for("the SCRAM-SHA-512 login to end", lambda: not _logs_in(sasl_addresses[2], SHA512, user, old),
             timeout=PROPAGATION_S)

    admin.alter_user_scram_credentials(deletions=[(user, SHA256)])
    wait_for("no credential left", lambda: described() == [("missing", 91)], timeout=PROPAGATION_S)
    with pytest.raises(ScramCredentialError) as raised:
        admin.describe_user_scram_credentials([user])
    assert (raised.value.code, raised.value.user, raised.value.retriable) == ("RESOURCE_NOT_FOUND", user, False)
    with pytest.raises(ScramCredentialError) as raised:  # deleting what is not there
        admin.alter_user_scram_credentials(deletions=[(user, SHA256)])
    assert raised.value.code == "RESOURCE_NOT_FOUND" and raised.value.altered == []
    wait_for("the SCRAM-SHA-256 login to end", lambda: not _logs_in(sasl_addresses[0], SHA256, user, new),
             timeout=PROPAGATION_S)


def test_describe_keeps_the_users_it_found_when_one_is_missing(admin: AdminClient) -> None:
    known, unknown = _unique("scram-known"), _unique("scram-unknown")
    admin.alter_user_scram_credentials([(known, SHA512, 4096, uuid.uuid4().hex), (known, SHA256, 4096, "x")])
    try:
        wait_for("the credentials", lambda: len(admin.describe_user_scram_credentials(None).get(known, ())) == 2,
                 timeout=PROPAGATION_S)
        with pytest.raises(ScramCredentialError) as raised:
            admin.describe_user_scram_credentials([known, unknown])
        assert (raised.value.user, raised.value.code) == (unknown, "RESOURCE_NOT_FOUND")
        assert sorted(raised.value.described[known]) == [(SHA256, 4096), (SHA512, 4096)]
        assert set(raised.value.errors) == {unknown}
    finally:  # both at once: one request per alteration of a user (a controller refuses two in one request)
        assert admin.alter_user_scram_credentials(deletions=[(known, SHA512), (known, SHA256)]) == [known]


@pytest.mark.parametrize(("iterations", "message"), [(SCRAM_MIN_ITERATIONS - 1, "Too few"), (16385, "Too many")])
def test_kafka_refuses_iterations_outside_its_bounds(admin: AdminClient, iterations: int, message: str) -> None:
    user = _unique("scram-iterations")
    with pytest.raises(ScramCredentialError) as raised:
        admin.alter_user_scram_credentials([(user, SHA256, iterations, "pw-" + uuid.uuid4().hex)])
    error = raised.value
    assert (error.code, error.errno, error.user, error.altered) == ("UNACCEPTABLE_CREDENTIAL", 93, user, [])
    assert message in error.message and not error.retriable
    with pytest.raises(ScramCredentialError, match="RESOURCE_NOT_FOUND"):  # nothing was stored
        admin.describe_user_scram_credentials([user])


def test_a_password_is_sent_salted_and_never_logged(admin: AdminClient, caplog: pytest.LogCaptureFixture) -> None:
    user, password = _unique("scram-quiet"), "pw-" + uuid.uuid4().hex
    with caplog.at_level(logging.DEBUG):
        admin.describe_client_quotas()  # kafka-python logs ordinary requests at DEBUG ...
        assert "DescribeClientQuotasRequest" in caplog.text
        admin.alter_user_scram_credentials([(user, SHA256, 4096, password)])
        admin.alter_user_scram_credentials(deletions=[(user, SHA256)])
    assert "AlterUserScramCredentialsRequest" not in caplog.text  # ... not the one with a salted password
    assert password not in caplog.text
    with pytest.raises(ValueError, match="SCRAM mechanism is one of"):  # checked before anything is sent
        admin.alter_user_scram_credentials([(user, "SCRAM-MD5", 4096, password)])
    with pytest.raises(ValueError, match="altered twice"):
        admin.alter_user_scram_credentials([(user, SHA256, 4096, password)], deletions=[(user, SHA256)])


# -- CreateTopics / DeleteTopics -------------------------------------------------------------------------------------


def test_topics_are_created_and_deleted(admin: AdminClient) -> None:
    topic = _unique("client-topic")
    spec = NewTopic(topic, num_partitions=2, replication_factor=3, configs={"retention.ms": "60000"})

    checked = admin.create_topics([spec], validate_only=True)
    assert (checked.throttle_time_ms, checked.topics[topic].code) == (0, "NONE")
    created = admin.create_topics([spec])  # validate_only created nothing
    assert (created.throttle_time_ms, created.topics[topic].code) == (0, "NONE")
    created.raise_for_errors()
    again = admin.create_topics([spec, NewTopic(_unique("too-replicated"), 1, 5)])
    assert [r.code for r in again.topics.values()] == ["TOPIC_ALREADY_EXISTS", "INVALID_REPLICATION_FACTOR"]
    with pytest.raises(KafkaBrokerError, match="TOPIC_ALREADY_EXISTS"):
        again.raise_for_errors()

    deleted = admin.delete_topics([topic])
    assert (deleted.throttle_time_ms, deleted.topics[topic].code) == (0, "NONE")
    assert admin.delete_topics([topic]).topics[topic].code == "UNKNOWN_TOPIC_OR_PARTITION"
