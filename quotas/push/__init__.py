"""Pushing desired state to brokers, and finding (and healing) where brokers drifted from it.

A commit enqueues a push per target it left behind; a push brings its target to the cluster's current
desired-state version; reconcile (Celery beat) catches up targets that are behind and compares those that are
current with desired state: the differences are drift. One module per job:

- ``dispatch``: what a commit enqueues (Celery messages, or direct pushes in the committing process), retry backoff;
- ``flags``: the portal's Redis: pending-push flags, and locks for work Kafka cannot order (``portal_lock``);
- ``address``: where a target is (engine broker, cluster-wide namespace, Kafka bootstrap and credentials);
- ``target_push``: one target's push, under its lock (``push_target``);
- ``group_push``: several targets of a cluster in rounds, and the drain lease (``push_group``);
- ``booking``: the Push rows of what landed or failed, in transactions of their own;
- ``reconcile``: comparing targets with desired state, recording drift (``reconcile_all``);
- ``resolve``: healing or adopting drift (``heal``, ``adopt``).

``quotas.apps`` imports ``dispatch`` at start-up: its receiver of ``push_wanted`` enqueues the pushes of commits.
"""
