#!/usr/bin/env python3
"""Compares two builds' instruction counts per unit of work from callgrind
profiles of whole runs (the async_enrich bench's RILL_BENCH_CALLGRIND mode).

Two runs of an app never do exactly the same work: commits, polls and cache
flushes follow the clock, so totals per input record vary by several per
cent between runs of one binary. What does not vary is what each function
costs per call. So each function's self cost per call in run B is weighed by
its call count in run A: the ratio is what B's code would have spent on A's
work, over what A spent (1.0 = the same code cost).

    python3 benches/python/callgrind_compare.py <A.out> <B.out> [top]

Prints one JSON line {"ratio": r, "unmatched_a": share, "unmatched_b":
share}; with `top`, the functions adding the most to the ratio first (to
stderr). Functions present in only one run (inlined differently) count at
their own cost in A and are reported as the unmatched share.
"""

import json
import re
import subprocess
import sys

SELF_LINE = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+\*\s+\S+?:(.+?) \[")
CALLS = re.compile(r"\(([\d,]+)x\)")


def load(path):
    """function -> (self instructions, calls), from callgrind_annotate's caller tree."""
    out = subprocess.run(
        ["callgrind_annotate", "--tree=caller", "--threshold=100", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.splitlines()
    costs = {}
    for i, line in enumerate(lines):
        m = SELF_LINE.match(line)
        if not m:
            continue
        own = int(m.group(1).replace(",", ""))
        calls = 0
        j = i - 1
        while j >= 0 and "<" in lines[j]:
            c = CALLS.search(lines[j])
            if c:
                calls += int(c.group(1).replace(",", ""))
            j -= 1
        s, c = costs.get(m.group(2), (0, 0))
        costs[m.group(2)] = (s + own, c + calls)
    return costs


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    base = sum(s for s, _ in a.values())
    weighed, unmatched_a, rows = 0.0, 0, []
    for name, (s, c) in a.items():
        sb, cb = b.get(name, (0, 0))
        if c > 0 and cb > 0:
            w = c * sb / cb
            rows.append((w - s, name, s / c, sb / cb))
        else:
            w = s
            unmatched_a += s
        weighed += w
    total_b = sum(s for s, _ in b.values())
    unmatched_b = sum(s for n, (s, _) in b.items() if n not in a)
    print(
        json.dumps(
            {
                "ratio": weighed / base,
                "unmatched_a": unmatched_a / base,
                "unmatched_b": unmatched_b / max(total_b, 1),
            }
        )
    )
    rows.sort(reverse=True)
    for delta, name, pa, pb in rows[:top]:
        print(
            f"{delta / base * 100:+7.3f} %  {pa:9.1f} -> {pb:9.1f} per call  {name[:100]}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
