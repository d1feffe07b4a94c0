#!/usr/bin/env python3
"""A confluent-kafka (librdkafka) group member for rebalance scenarios.

What it is for: the interop suite starts several of these as separate
processes to watch group membership from a real third-party client, e.g. to
prove that a static member restarting within its session timeout causes no
rebalance (KIP-345): the other members see no revocation or assignment.

How it is run:

    python3 tests/python/confluent_member.py <bootstrap> <group> <topic> \
        <group.instance.id or -> <classic|consumer>

It subscribes to <topic> in <group> (static when an instance id is given,
with session.timeout.ms=30000 for the classic protocol) and prints one line
per event on stdout, flushed at once:

    ASSIGN <p,p,...>   partitions added (the whole assignment for classic)
    REVOKE <p,p,...>   partitions taken away
    LOST <p,p,...>     partitions lost
    ERROR <text>       a client error
    CLOSED             after a clean close

It runs until a line "exit" (or end of input) arrives on stdin, then closes
the consumer (a static member sends no LeaveGroup on close) and exits 0.
"""

import sys
import threading

from confluent_kafka import Consumer


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    bootstrap, group, topic, instance, protocol = sys.argv[1:]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "group.protocol": protocol,
    }
    if protocol == "classic":
        conf["session.timeout.ms"] = 30000
        conf["heartbeat.interval.ms"] = 1000
        conf["partition.assignment.strategy"] = "range"
    if instance != "-":
        conf["group.instance.id"] = instance

    def emit(line):
        print(line, flush=True)

    def parts(ps):
        return ",".join(str(p.partition) for p in sorted(ps, key=lambda p: p.partition))

    def on_assign(consumer, ps):
        emit(f"ASSIGN {parts(ps)}")

    def on_revoke(consumer, ps):
        emit(f"REVOKE {parts(ps)}")

    def on_lost(consumer, ps):
        emit(f"LOST {parts(ps)}")

    def on_error(err):
        emit(f"ERROR {err}")

    conf["error_cb"] = on_error
    consumer = Consumer(conf)
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    stop = threading.Event()

    def watch_stdin():
        for line in sys.stdin:
            if line.strip() == "exit":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.is_set():
        msg = consumer.poll(0.2)
        if msg is not None and msg.error():
            emit(f"ERROR {msg.error()}")
    consumer.close()
    emit("CLOSED")


if __name__ == "__main__":
    main()
