#!/usr/bin/env python3
"""Interop check of transactions with confluent-kafka (librdkafka).

What it proves: a broker serves librdkafka's transactional producer and its
read_committed consumer (KIP-98/447). On a fresh topic with `partitions`
partitions it runs, with one transactional producer:
  1. a committed transaction of `count` keyed records (value c-<i>),
  2. an aborted transaction of `count` records (a-<i>), flushed first so the
     records are in the log before the abort,
  3. a committed transaction of `count` records (d-<i>) that also commits a
     group's offsets (consumed from transactions 1-3's partitions) with
     send_offsets_to_transaction,
  4. zombie fencing: the producer opens a transaction and writes z-<i>, then
     a second producer with the same transactional.id calls
     init_transactions; the first producer's commit must fail with a fatal
     _FENCED error and its records never become visible.
Then a read_committed consumer must see exactly the c- and d- records (each
once), a read_uncommitted consumer every record written (a- and z- too), the
group's committed offsets must equal the offsets consumed, and the
read_committed end offsets (ListOffsets, LSO) must equal the log end once
every transaction has ended.

    python3 tests/python/confluent_txn.py <bootstrap> <topic> <count> <partitions>

It prints one JSON line: {"committed_seen":N,"uncommitted_seen":N,
"aborted_visible":A,"zombie_visible":Z,"fenced":true,"offsets_ok":true,
"duplicates":D,"lso_ok":true} and exits 0 only if everything matched (reasons on stderr).
"""

import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

problems = []


def problem(msg):
    problems.append(msg)
    print("confluent_txn: " + msg, file=sys.stderr)


def read_all(bs, topic, partitions, isolation, want, limit_s=30):
    c = Consumer({
        "bootstrap.servers": bs,
        "group.id": "reader-" + uuid.uuid4().hex,
        "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    vals = []
    deadline = time.time() + limit_s
    idle_since = None
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            if len(vals) >= want:
                # Wait a little longer for anything that should not be there.
                idle_since = idle_since or time.time()
                if time.time() - idle_since > 2:
                    break
            continue
        if m.error():
            continue
        idle_since = None
        vals.append(m.value().decode())
    c.close()
    return vals


def main():
    bs, topic, count, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result()
    txn_id = "txn-" + topic
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id,
                  "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, key="k%d" % i, value="c-%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, key="k%d" % i, value="a-%d" % i)
    p.flush(30)
    p.abort_transaction(30)

    group = "g-" + topic
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe([topic])
    consumed = {}
    deadline = time.time() + 30
    seen = 0
    while time.time() < deadline and seen < count:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        seen += 1
        consumed[m.partition()] = m.offset() + 1
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, key="k%d" % i, value="d-%d" % i)
    offsets = [TopicPartition(topic, part, off) for part, off in sorted(consumed.items())]
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    committed = {tp.partition: tp.offset
                 for tp in c.committed([TopicPartition(topic, q) for q in range(partitions)], 30)
                 if tp.offset >= 0}
    c.close()
    offsets_ok = committed == consumed
    if not offsets_ok:
        problem("committed offsets %r differ from consumed %r" % (committed, consumed))

    p.begin_transaction()
    for i in range(count):
        p.produce(topic, key="k%d" % i, value="z-%d" % i)
    p.flush(30)
    p2 = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    p2.init_transactions(30)
    fenced = False
    try:
        p.commit_transaction(30)
        problem("the zombie producer committed after being fenced")
    except KafkaException as e:
        err = e.args[0]
        fenced = err.fatal() and err.name() == "_FENCED"
        if not fenced:
            problem("zombie commit failed with %s (fatal=%s), not a fatal _FENCED" % (err.name(), err.fatal()))

    rc = read_all(bs, topic, partitions, "read_committed", 2 * count)
    ru = read_all(bs, topic, partitions, "read_uncommitted", 4 * count)
    visible = sorted(rc)
    expected = sorted(["c-%d" % i for i in range(count)] + ["d-%d" % i for i in range(count)])
    duplicates = len(rc) - len(set(rc))
    if visible != expected:
        problem("read_committed saw %d records, expected the %d committed ones (first extras: %r)"
                % (len(rc), len(expected), sorted(set(rc) - set(expected))[:5]))
    aborted_visible = sum(1 for v in rc if v.startswith("a-"))
    zombie_visible = sum(1 for v in rc if v.startswith("z-"))
    if len(ru) != 4 * count:
        problem("read_uncommitted saw %d records, expected %d" % (len(ru), 4 * count))

    # After the fence aborted the zombie's transaction nothing is open, so
    # the end a read_committed client sees (ListOffsets with isolation
    # read_committed: the last stable offset) is the log end.
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        probe = Consumer({"bootstrap.servers": bs, "group.id": "probe-" + uuid.uuid4().hex,
                          "isolation.level": isolation})
        ends[isolation] = [probe.get_watermark_offsets(TopicPartition(topic, q), timeout=10, cached=False)[1]
                           for q in range(partitions)]
        probe.close()
    lso_ok = ends["read_committed"] == ends["read_uncommitted"]
    if not lso_ok:
        problem("read_committed end offsets %r differ from the log ends %r"
                % (ends["read_committed"], ends["read_uncommitted"]))

    print(json.dumps({
        "committed_seen": len(rc), "uncommitted_seen": len(ru),
        "aborted_visible": aborted_visible, "zombie_visible": zombie_visible,
        "fenced": fenced, "offsets_ok": offsets_ok, "duplicates": duplicates,
        "lso_ok": lso_ok,
    }))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
