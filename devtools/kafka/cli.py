"""``python -m devtools.kafka``: start, stop or show a project-local Kafka cluster (one JSON line of facts)."""


from __future__ import annotations

import argparse
import json

import devtools.kafka
from devtools.kafka.base import BUDGET_REDIS_URL_ENV, TELEMETRY_ENDPOINT_ENV, KafkaError, _log
from devtools.kafka.cluster import KafkaCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=devtools.kafka.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--name", default="dev", help="the cluster (folder .run/kafka/NAME); default dev")
    parser.add_argument("--fresh", action="store_true", help="start: wipe the cluster's data first")
    parser.add_argument("--timeout", type=float, default=120.0, help="start: seconds to wait for every broker")
    parser.add_argument("--no-jmx-exporter", dest="jmx_exporter", action="store_false",
                        help="start: no Prometheus JMX exporter agent on the brokers")
    parser.add_argument("--telemetry-endpoint", default=None,
                        help=f"start: the KIP-714 plugin's OTLP/HTTP receiver, e.g. http://127.0.0.1:8000/v1/metrics "
                        f"(default ${TELEMETRY_ENDPOINT_ENV}; none: the plugin is off)")
    parser.add_argument("--telemetry-cluster", default=None,
                        help="start: the portal's name of this cluster, sent as X-Quotas-Cluster (default NAME)")
    parser.add_argument("--no-quota-callback", dest="quota_callback", action="store_false",
                        help="start: Kafka's own default client quota callback instead of the portal's")
    parser.add_argument("--budget-redis-url", default=None,
                        help=f"start: the engine's Redis for cluster-wide budgets, e.g. redis://127.0.0.1:6379/0 "
                        f"(default ${BUDGET_REDIS_URL_ENV}; none: the callback answers as Kafka's default one)")
    parser.add_argument("--budget-cluster", default=None,
                        help="start: the portal's name of this cluster for its budgets (default NAME)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            cluster = KafkaCluster(
                args.name, fresh=args.fresh, start_timeout=args.timeout, jmx_exporter=args.jmx_exporter,
                telemetry_endpoint=args.telemetry_endpoint, telemetry_cluster=args.telemetry_cluster,
                quota_callback=args.quota_callback, budget_redis_url=args.budget_redis_url,
                budget_cluster=args.budget_cluster,
            ).start()
            print(json.dumps(cluster.facts()), flush=True)
            for node in cluster.nodes:
                node.proc = None  # the nodes run on after this command; nothing to reap here
            return 0
        try:
            cluster = KafkaCluster.load(args.name)
        except KafkaError as e:
            _log(str(e))
            return 1 if args.action == "status" else 0
        if args.action == "status":
            if not cluster.is_running():
                down = [n.node_id for n in cluster.nodes if not n.is_running()]
                _log(f"cluster {args.name!r} is not running (node(s) {down} down)")
                return 1
            facts = cluster.facts()
            facts["brokers_in_metadata"] = sorted(cluster.brokers_in_metadata())
            print(json.dumps(facts), flush=True)
            return 0
        cluster.stop()
        _log(f"cluster {args.name!r} stopped")
        return 0
    except KafkaError as e:
        _log(str(e))
        return 1
