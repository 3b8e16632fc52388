"""Where a namespace's client-quota sensors live: a dozen hash slots, spread evenly over a Redis Cluster.

A script call on a Redis Cluster may touch one hash slot. With a hash tag per sensor, a broker's batch of 256
decisions over distinct sensors became 256 script calls, and every call costs Redis a fixed price (dispatch, the
MGET and MSET, the answer) that one Redis pays once per batch. So an entity's sensors (every quota type, and each
sensor's ``:t`` throttle statistics) share the tag of one of ``SENSOR_BUCKETS`` buckets of its namespace: a batch
becomes one script call per bucket, about 21 decisions a call for a batch of 256.

Each bucket's tag is chosen (a salt searched once per namespace, the same in every process) so that its slot lies
in the middle of its twelfth of the slot range. The masters of a cluster hold contiguous slot ranges (as
``redis-cli --cluster create`` and resharding by ranges give them), so a namespace's buckets spread evenly over 1,
2, 3, 4, 6 or 12 masters; a deployment's many namespaces (one per broker) fill the rest.

Layout: ``qe:{<ns>|s<bucket>.<salt>}:<Type>(<tags>)``, with the throttle statistics at the same key plus ``:t``.
The closing parenthesis keeps a sensor's key from ever equalling another sensor's ``:t`` key (client-ids are
arbitrary text). The previous layout, ``qe:{<ns>|<Type>-<tags>}``, is no longer read: see ``engine/README.md``.
"""

from __future__ import annotations

import functools
import zlib
from binascii import crc_hqx

#: Buckets per namespace: divides evenly over 1, 2, 3, 4, 6 and 12 masters. Part of the key names: changing it
#: moves every sensor to a new key (they start fresh), so every process of a deployment must use the same value.
SENSOR_BUCKETS = 12
CLUSTER_SLOTS = 16384


@functools.lru_cache(maxsize=4096)
def bucket_tags(namespace: str) -> tuple[tuple[str, int], ...]:
    """(hash tag, slot) of each bucket of a namespace: bucket ``k``'s slot in the middle half of its range."""
    out = []
    width = CLUSTER_SLOTS / SENSOR_BUCKETS
    for k in range(SENSOR_BUCKETS):
        lo, hi = (k + 0.25) * width, (k + 0.75) * width
        salt = 0
        while True:
            tag = f"{namespace}|s{k}.{salt}"
            slot = crc_hqx(tag.encode(), 0) % CLUSTER_SLOTS
            if lo <= slot < hi:
                break
            salt += 1
        out.append((tag, slot))
    return tuple(out)


def entity_bucket(tags: str) -> int:
    """The bucket of a sensor's tags (``user:client-id``): the same for every quota type of the entity."""
    return zlib.crc32(tags.encode()) % SENSOR_BUCKETS


def sensor_key(namespace: str, type_name: str, tags: str) -> tuple[str, int]:
    """The key of a client-quota sensor and its hash slot (computed once, here, never per decision)."""
    tag, slot = bucket_tags(namespace)[entity_bucket(tags)]
    return f"qe:{{{tag}}}:{type_name}({tags})", slot
