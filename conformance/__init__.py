"""Reference traces and vectors from Kafka's and Pulsar's own code, and the commands that replay them (no Django)."""
