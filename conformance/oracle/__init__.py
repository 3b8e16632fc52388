"""The quota engine checked against a live Apache Kafka broker (the oracle).

    python -m conformance.oracle --bootstrap 127.0.0.1:PORT [--sasl-bootstrap 127.0.0.1:PORT,...]
                                       [--redis-url URL] [--quick | --duration S] [--dump FILE]

Real producers run over byte-rate quotas and a CreateTopics burst runs over a ``controller_mutation_rate``
quota on a real cluster; every response's ``throttle_time_ms`` (and each topic's THROTTLING_QUOTA_EXCEEDED) is
recorded with the request's size and the client's send and receive times, and the same sequence is replayed
through the engine's reference model and its Redis implementation, as ``client_quota_manager`` cases of
``conformance.replay`` (``EngineFactory`` and the case kind build the managers and configs exactly as for the
conformance files). Progress goes to stderr; the last line of stdout is one JSON object
(``decision_agreement``, ``throttle_diff_p99_ms``, ``bound_ms``, ``within_bound``, per engine, per scenario,
the wrong replays). Exit status 0 when the engines agree and every wrong replay is caught, 1 when not, 2 when
the run itself failed. ``--quick`` (12 s of traffic, about 20 s in all) is what the test runs; the default is
30 s, so that the oldest sample is purged and the windows roll over a few times.

What the broker does (Kafka's source, ``KafkaApis.handleProduceRequest``, ``ControllerApis``,
``ControllerMutationQuotaManager``, ``RequestHandlerHelper``):

- Produce: at the response callback (after the local append; acks=1 here), ``time.milliseconds()`` is taken
  and ``request.sizeInBytes`` is recorded on the client's quota sensor (``ClientQuotaManager``: record, then
  check; throttle ``(O-T)/T*W``). ``sizeInBytes`` is ``RequestChannel``'s ``header.size + bodyAndSize.size``:
  the request frame without its 4-byte length prefix. Checked three ways: librdkafka's own count of the bytes
  it sent equals kafka-python's encoding of the same request (``size_check``), the throttles agree to the
  millisecond with it, and counting only the record batch (``request_size``) or the prefix too
  (``length_prefix``) moves them. Every request counts, also one answered with an error.
- CreateTopics v6+ (strict, KIP-599): the broker forwards it to the active controller, whose
  ``ReplicationControlManager`` calls ``StrictControllerMutationQuota.record(numPartitions)`` per topic in
  request order (check the token bucket, then record; a refused topic gets THROTTLING_QUOTA_EXCEEDED and
  records nothing). The response's ``throttle_time_ms`` is the quota's last throttle decayed to the response
  time; the broker passes it on (``sendForwardedResponse``) and mutes the channel.
- ``quota.window.num=11``, ``quota.window.size.seconds=1`` (and the controller's same defaults): the
  project's cluster keeps Kafka's defaults.

Scenarios (each its own client-id and fresh 1-partition RF=1 topic, so one broker's sensor sees all of a
scenario's traffic; they run concurrently, one thread each):

- ``kp-<rate>-<size>``: kafka-python's protocol classes on one blocking socket to the partition leader, one
  ProduceRequest at a time (acks=1); 8 and 24 kB/s x 1024 and 4096-byte messages; quota at client-id (level 7).
  (256 B at 24 kB/s works as well, 0.9995 over 30 s, at twice the requests; see ``EdgeGuard`` for why it did
  not before the guard: 0.963.)
- ``kp-precedence``: quotas at user ANONYMOUS + client-id (level 1) and at the client-id default (level 8,
  higher): level 1 must win. The default applies to every client without a more specific quota while the run
  lasts (the other scenarios have one), so it is set high and removed at the end.
- ``cf-user``: confluent-kafka over SASL_PLAINTEXT/SCRAM-SHA-256 as a user created for the run with
  AlterUserScramCredentials (no authorizer: no super user needed); quotas at the user (level 3) and at its
  client-id (level 7, higher): level 3 must win. Without ``--sasl-bootstrap``: PLAINTEXT, client-id quota.
- ``mutation``: CreateTopics v7 with topics of 1, 2 and 3 partitions per request (a topic of N partitions
  costs N tokens) from a client-id with ``controller_mutation_rate`` 2/s (burst 2 x 11 = 22 tokens).

Clients obey throttling as KIP-219 clients do (the broker mutes the channel; the client waits
``throttle_time_ms`` after the response before it sends again). Offered load is 2.5 x the quota (produce) and
2 requests/s (mutations): each trace has an unthrottled start, the onset and a throttled steady state. All
clients connect first, then each sends its first request alone (the first record opens the sensor's first
sample, from which every window of the next 11 s is measured, so its time should be known well), then all
run together. Producers send clear of the instants where the sampled Rate jumps (``EdgeGuard``: a few sends
per scenario are delayed by milliseconds); without that, a record within its uncertainty of the opening of a
sample can open it on the broker and not in the replay, and the window is then off by one inter-request gap
until a pause re-aligns them (measured: 3.7% of decisions flipped at 256 B and 24 kB/s over 30 s, all within
the bound, and 9 of 64 cf-user throttles beyond it).

confluent-kafka: ``linger.ms=0``, ``batch.num.messages=1``, ``max.in.flight=1``, no retries, every broker
connection opened up front (``enable.sparse.connections=false``), and the driver is synchronous: produce one
message, ``flush()`` until its delivery report, wait out the throttle, produce the next. librdkafka's
``throttle_cb`` fires for every broker response with ``throttle_time_ms > 0`` and once when it returns to 0
(``rd_kafka_op_throttle_time``; nothing for 0 after 0), as a high-priority op on the queue that also carries
the delivery reports, which ``flush()`` serves to the end. With one request outstanding, the events served
between ``produce()`` and the end of ``flush()`` belong to that request: the last one from the partition
leader is its throttle, none means 0 (events from other brokers or other responses carry 0 here: no request
quota is set). The request's size is librdkafka's own: its ``protocol`` debug line
``Sent ProduceRequest (vN, X bytes`` (X counts the length prefix). Send and receive times are taken around
``produce()`` and in the delivery callback.

Replay. The broker's record time is not visible to the client: it lies between the client's send and
receive, on the broker's 1 ms clock (the same wall clock: the cluster runs on this host). For Produce the
replay puts it at the midpoint ``t = (floor(send) + floor(recv)) // 2``. For CreateTopics it takes the send
side, ``t = floor(send)``: the controller records the quota when it handles the request, and the commit of
the topics' records through the 3-voter metadata quorum (most of the ~40 ms round trip) comes after; the
midpoint put every record ~20 ms late, which offsets the bucket against the time it was last full and flipped
decisions. The response's throttle is the quota's last throttle decayed to ``floor(recv)``, as Kafka decays it
to the response time. ``u`` is the largest distance from ``t`` to either end (half the span, or all of it):
how far the truth can be. A produce request is recorded whatever the decision, so that replay runs free. A
strict token bucket's
state depends on which topics were admitted: one check taken within ``u`` of an empty bucket decides whether
N tokens go, and a replay that decided otherwise would be N/T seconds off for every later throttle. So the
CreateTopics replay is conditioned: the engine decides each topic (that decision is compared), then records
what the broker recorded (``unrecord`` with the permits, or their negation, as the conformance case kind
allows). The free-running figures are reported too (``free_running_model``).

The bound. Between sample boundaries the sampled-Rate throttle is ``S/T - W(t)``: S is fixed and the window W
grows 1 ms per ms, so the change over the uncertainty, ``rate'/T * W`` with the window's own growth, is one
millisecond per millisecond; the token bucket refills T tokens/s, so its ``-K/T`` moves at the same slope.
W is measured from the start of the oldest sample (the time of an earlier record, as uncertain) and the bucket
from its last update. So a throttle may differ by this record's uncertainty, plus that of the reference
record, plus 1 ms for ``Math.round``: per scenario ``bound_ms = 2 * ceil(p99(u)) + 1``. Across the
instants where the Rate jumps it can be off by up to a window: ``EdgeGuard`` keeps records clear of them (and
counts the few that straddle one anyway), and the comparison is on percentiles.

The comparison, per engine, over all scenarios (and per scenario, reported): decisions (throttled or not; per
topic for CreateTopics) agree on at least 99%; at least 99% of the responses that either side throttled are
within their scenario's bound, and the p99 of ``|engine - broker|`` over them is within the largest bound;
each scenario's bound came from the expected precedence level. The same comparison must fail, over the
scenarios each applies to and in each alone, for deliberately wrong replays on the model: ``window_count``
(10 samples instead of 11), ``precedence`` (the most specific entity ignored, so a lower level's quota
applies) and ``request_size`` (the record batch instead of ``request.sizeInBytes``; one token per topic
instead of one per partition). ``length_prefix`` is reported, not required.

The replay's quota config is the cluster's (what DescribeClientQuotas answered at the start plus every
scenario's entities), so the ``quotaTypesEnabled`` mask and precedence are as on the broker. The run's quotas,
topics and SCRAM user are removed at the end. No Django and no ``devtools`` here (import contracts).

Clients. The blocking connections (timed exchanges, exact request sizes) and the admin requests are
``kafka_wire``'s, the project's one Kafka wire client, whose bytes are kafka-python's schema classes: the oracle
tests the engine, not that client, and nothing it compares comes from the portal's code but the engine. The
independent client stays independent: librdkafka (confluent-kafka) drives the ``cf-user`` scenario, creates
and deletes the SCRAM user, and its own count of the bytes it sent checks kafka-python's encoding of the same
request (``size_check``).

Modules: ``base`` (settings, error, clock), ``admin``, ``scenarios``, ``drivers``, ``compare`` (replay and
comparison), ``run`` (a run and the command line; ``python -m conformance.oracle``).
"""
