"""The demo: its world (``manage.py demo_data``) and the traffic that drives it (``loadgen`` through the engine
clusters, ``kafka_traffic`` on the demo's Kafka cluster), kept apart from the quota domain it shows."""
