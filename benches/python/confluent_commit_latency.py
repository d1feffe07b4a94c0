#!/usr/bin/env python3
"""confluent-kafka (librdkafka) as the peer of Rill's commit-latency bench.

Joins group <group> on <topic>, then for <seconds> polls (batches of up to
1,000 records, 10 ms timeout) and every 100 ms commits the next offset of
every assigned partition synchronously with explicit offsets (so every
commit reaches the broker, even when nothing new was consumed), timing each
commit call.

    python3 benches/python/confluent_commit_latency.py \
        <bootstrap> <topic> <group> <seconds>

Prints one JSON line: {"commits": N, "consumed": C, "latencies_ms": [...]}.
"""

import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition


def main():
    bootstrap, topic, group, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while not c.assignment():
        if time.monotonic() > deadline:
            sys.exit("no assignment within 60 s")
        c.poll(0.1)
    positions = {}
    latencies = []
    consumed = 0
    end = time.monotonic() + seconds
    next_commit = time.monotonic()
    while time.monotonic() < end:
        for m in c.consume(num_messages=1000, timeout=0.01):
            if m.error() is None:
                positions[m.partition()] = m.offset() + 1
                consumed += 1
        now = time.monotonic()
        if now >= next_commit:
            offsets = [TopicPartition(topic, tp.partition, positions.get(tp.partition, 0))
                       for tp in c.assignment()]
            t = time.perf_counter()
            c.commit(offsets=offsets, asynchronous=False)
            latencies.append((time.perf_counter() - t) * 1000.0)
            next_commit = now + 0.1
    c.close()
    print(json.dumps({"commits": len(latencies), "consumed": consumed, "latencies_ms": latencies}))


if __name__ == "__main__":
    main()
