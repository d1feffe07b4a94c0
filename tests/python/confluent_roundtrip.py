#!/usr/bin/env python3
"""Interop check with confluent-kafka (the Python binding of librdkafka).

What it proves: a broker serves librdkafka's admin client, idempotent
producer and consumer end to end with a given compression codec. It creates
a topic with confluent_kafka.admin.AdminClient, produces `count` keyed
records (key-<i> / value-<i>) with a Producer using enable.idempotence=true
(hence acks=all) and compression.type=<compression>, checks every delivery
report, then reads everything back with a Consumer that assign()s every
partition at OFFSET_BEGINNING (no group membership: a unique group.id is set
only because librdkafka requires one, and auto commit is off). It verifies
that every key arrived exactly once with its value, that offsets within
each partition are strictly increasing starting at 0, and that the
partitions' end offsets (high watermarks, from ListOffsets latest) sum to
`count` (offsets count records, not batches, whatever the codec).

How it is run:

    python3 tests/python/confluent_roundtrip.py \
        <bootstrap> <topic> <count> <partitions> <none|gzip|snappy|lz4|zstd> \
        [client.properties]

The optional properties file (librdkafka key=value lines) is applied to all
three clients, e.g. security.protocol=SASL_SSL with sasl.* and ssl.ca.location.

It prints one JSON line to stdout:
    {"produced":N,"consumed":N,"duplicates":D,"missing":M,"partitions":P,
     "end_offsets_sum":S,"compression":"..."}
and exits 0 only if everything matched; otherwise it prints the reason(s)
to stderr and exits 1. Set RILL_RDKAFKA_DEBUG (e.g. "protocol,broker") to
pass librdkafka's `debug` setting to all three clients (logs go to stderr).
"""

import json
import os
import sys
import time
import uuid

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CONSUME_LIMIT_S = 60.0

problems = []


def problem(msg):
    problems.append(msg)
    if len(problems) <= 20:
        print(f"confluent_roundtrip: {msg}", file=sys.stderr, flush=True)
    elif len(problems) == 21:
        print("confluent_roundtrip: (further problems not shown)", file=sys.stderr, flush=True)


def summary(produced, consumed, duplicates, missing, partitions, end_sum, compression):
    print(
        json.dumps(
            {
                "produced": produced,
                "consumed": consumed,
                "duplicates": duplicates,
                "missing": missing,
                "partitions": partitions,
                "end_offsets_sum": end_sum,
                "compression": compression,
            },
            separators=(",", ":"),
        ),
        flush=True,
    )


def main():
    if len(sys.argv) not in (6, 7):
        print(
            "usage: confluent_roundtrip.py <bootstrap> <topic> <count> <partitions> "
            "<none|gzip|snappy|lz4|zstd> [client.properties]",
            file=sys.stderr,
        )
        return 2
    bootstrap, topic = sys.argv[1], sys.argv[2]
    count, partitions = int(sys.argv[3]), int(sys.argv[4])
    compression = sys.argv[5]
    if compression not in CODECS:
        print(f"confluent_roundtrip: unknown compression {compression!r}", file=sys.stderr)
        return 2

    common = {"bootstrap.servers": bootstrap}
    # Optional librdkafka properties (key=value lines), e.g. security
    # settings: security.protocol, sasl.mechanism, sasl.username, ...
    if len(sys.argv) == 7:
        with open(sys.argv[6], encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    common[k.strip()] = v.strip()
    debug = os.environ.get("RILL_RDKAFKA_DEBUG")
    if debug:
        common["debug"] = debug

    # 1. Create the topic; any error (including TOPIC_ALREADY_EXISTS) fails.
    admin = AdminClient(dict(common))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=30,
        request_timeout=30,
    )
    try:
        futures[topic].result(timeout=60)
    except Exception as e:  # KafkaException carrying a KafkaError
        print(f"confluent_roundtrip: creating topic {topic} failed: {e}", file=sys.stderr)
        summary(0, 0, 0, count, partitions, -1, compression)
        return 1

    # 2. Produce with the idempotent producer and the requested codec.
    producer = Producer(
        {
            **common,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": compression,
        }
    )
    delivered = {"ok": 0, "err": 0}

    def on_delivery(err, msg):
        if err is not None:
            delivered["err"] += 1
            problem(f"delivery of {msg.key()!r} failed: {err}")
        elif msg.offset() is None or msg.offset() < 0:
            delivered["err"] += 1
            problem(f"delivery of {msg.key()!r} reported no offset")
        else:
            delivered["ok"] += 1

    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=f"key-{i}", value=f"value-{i}", on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        problem(f"{remaining} messages still undelivered after flush(60)")
    if delivered["ok"] + delivered["err"] != count:
        problem(f"{delivered['ok'] + delivered['err']} delivery reports for {count} messages")
    produced = delivered["ok"]

    # 3. Consume everything back from the beginning of every partition.
    consumer = Consumer(
        {
            **common,
            "group.id": f"confluent-roundtrip-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = {}
    last_offset = {}
    consumed = 0
    deadline = time.monotonic() + CONSUME_LIMIT_S

    def take(msg):
        nonlocal consumed
        consumed += 1
        p, off = msg.partition(), msg.offset()
        prev = last_offset.get(p)
        if prev is None and off != 0:
            problem(f"partition {p} starts at offset {off}, not 0")
        elif prev is not None and off <= prev:
            problem(f"partition {p} offset {off} does not increase (previous {prev})")
        last_offset[p] = off
        key = msg.key().decode() if msg.key() is not None else None
        value = msg.value().decode() if msg.value() is not None else None
        if key is None or not key.startswith("key-") or value != "value-" + key[4:]:
            problem(f"record {topic}-{p}@{off} has key {key!r} value {value!r}")
        seen[key] = seen.get(key, 0) + 1

    while consumed < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=1000, timeout=0.5):
            err = msg.error()
            if err is None:
                take(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                problem(f"consumer error: {err}")
    if consumed < count:
        positions = consumer.position(
            [TopicPartition(topic, p) for p in range(partitions)]
        )
        problem(
            f"consumed only {consumed} of {count} records within {CONSUME_LIMIT_S:.0f} s; "
            f"positions: {[(tp.partition, tp.offset) for tp in positions]}"
        )
    # A short extra poll: nothing beyond `count` may be there.
    for msg in consumer.consume(num_messages=1000, timeout=0.5):
        if msg.error() is None:
            problem(f"unexpected extra record {topic}-{msg.partition()}@{msg.offset()}")
            take(msg)

    # 4. End offsets (ListOffsets latest) must sum to `count` and each must be
    #    one past the last offset consumed from that partition.
    end_sum = 0
    for p in range(partitions):
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        except KafkaException as e:
            problem(f"watermarks of partition {p} failed: {e}")
            end_sum = -1
            break
        end_sum += high
        if high != last_offset.get(p, -1) + 1:
            problem(
                f"end offset of {topic}-{p} is {high} but the last consumed offset was "
                f"{last_offset.get(p, -1)}"
            )
    consumer.close()
    if end_sum != -1 and end_sum != count:
        problem(f"end offsets sum to {end_sum}, expected {count}")

    missing = sum(1 for i in range(count) if f"key-{i}" not in seen)
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    unexpected = len(seen) - (count - missing)
    if missing:
        problem(f"{missing} keys never consumed")
    if duplicates:
        problem(f"{duplicates} duplicate deliveries")
    if unexpected:
        problem(f"{unexpected} unexpected keys consumed")
    if produced != count:
        problem(f"produced {produced} of {count}")

    summary(produced, consumed, duplicates, missing, partitions, end_sum, compression)
    if problems:
        print(f"confluent_roundtrip: FAILED ({len(problems)} problem(s))", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
