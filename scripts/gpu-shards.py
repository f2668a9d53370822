#!/usr/bin/env python3
"""Splits the [gpu] test cases over processes for scripts/gpu-check.sh.

NAMES holds one test case name a line (`flashjit_gpu_tests
--list-test-names-only`); DURATIONS is tests/gpu/gpu-durations.tsv
(seconds<TAB>name; names missing there weigh the median). Writes
OUTPREFIX<k>.txt for k in 0..SHARDS-1, each a Catch2 `-f` input file, by
longest-processing-time-first: each case, longest first, goes to the shard
with the least total so far. `--split NAME=PARTS` runs a case that reads
FLASHJIT_MATRIX_PART as PARTS pieces in different shards; such a shard's
file starts with `#env FLASHJIT_MATRIX_PART=<part>/<parts>` (Catch2 skips
lines starting with '#'; gpu-check.sh exports it). Catch2 reads each other
line as one quoted name, in which ',', '[', ']' and '\\' must be escaped.
Prints each shard's predicted seconds. Every name lands in exactly one
shard, or each of its pieces in a different one.
"""
import argparse
import statistics
import sys


def escape(name):
    """A test case name as Catch2's test-spec parser reads it literally."""
    for c in "\\,[]":
        name = name.replace(c, "\\" + c)
    return name


def read_seconds(path):
    seconds = {}
    for line in open(path):
        if line.startswith("#") or "\t" not in line:
            continue
        s, name = line.rstrip("\n").split("\t", 1)
        seconds[name] = float(s)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names")
    ap.add_argument("durations")
    ap.add_argument("shards", type=int)
    ap.add_argument("outprefix")
    ap.add_argument("--split", action="append", default=[],
                    metavar="NAME=PARTS")
    a = ap.parse_args()
    if a.shards < 1:
        sys.exit(f"gpu-shards: shards = {a.shards} must be at least 1")
    names = [l.rstrip("\n") for l in open(a.names) if l.strip()]
    seconds = read_seconds(a.durations)
    default = statistics.median(seconds.values()) if seconds else 1.0
    split = {}
    for s in a.split:
        name, _, parts = s.rpartition("=")
        if not name or not parts.isdigit() or int(parts) < 1:
            sys.exit(f"gpu-shards: --split '{s}' is not NAME=PARTS")
        # More pieces than shards would put two in one process.
        split[name] = min(int(parts), a.shards)
    jobs = []  # (seconds, name, part, parts)
    for n in names:
        w = seconds.get(n, default)
        p = split.get(n, 1)
        jobs += [(w / p, n, k, p) for k in range(p)]
    load = [0.0] * a.shards
    members = [[] for _ in range(a.shards)]
    env = [None] * a.shards
    for w, n, k, p in sorted(jobs, key=lambda j: -j[0]):
        free = [s for s in range(a.shards) if p == 1 or env[s] is None]
        s = min(free, key=lambda s: load[s])
        if p > 1:
            env[s] = f"FLASHJIT_MATRIX_PART={k}/{p}"
        load[s] += w
        members[s].append(n)
    for s in range(a.shards):
        with open(f"{a.outprefix}{s}.txt", "w") as f:
            if env[s]:
                f.write(f"#env {env[s]}\n")
            f.writelines(escape(n) + "\n" for n in members[s])
        print(f"gpu shard {s}: {len(members[s])} cases, ~{load[s]:.0f} s"
              + (f" ({env[s]})" if env[s] else ""))


if __name__ == "__main__":
    main()
