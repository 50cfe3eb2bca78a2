"""Kafka's default partitioner hash, for every client that places keyed records.

``murmur2`` is Kafka's ``org.apache.kafka.common.utils.Utils.murmur2`` (seed
``0x9747b28c``, m ``0x5bd1e995``, r 24); a key goes to partition
``(murmur2(key) & 0x7fffffff) % partitions``, as Kafka's producer places it,
so records keyed here land where other Kafka-model clients put them.
"""

from __future__ import annotations

__all__ = ["MASK32", "SEED", "M", "murmur2"]

SEED = 0x9747B28C
M = 0x5BD1E995
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (the reference, one input)."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * M) & MASK32
        k ^= k >> 24
        k = (k * M) & MASK32
        h = ((h * M) & MASK32) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h
