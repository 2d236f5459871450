"""Worker processes for the curated-memory concurrency and crash tests.

Run as ``python memory_worker.py MODE ...`` with ``MEMSTRATA_HOME`` (and any limit
override) in the environment. Modes:

* ``adds ID COUNT``: add COUNT distinct entries owned by worker ID.
* ``counters ID ITERATIONS COUNTERS SEED``: own COUNTERS counter entries and bump them by
  exact-text replace, mixed with adds and removes of temporary entries; print the final
  expected state as JSON. A lost update makes a later replace miss and the worker fail.
* ``crash NAME LOG``: forever bump one owned counter entry, logging ``about V`` before and
  ``wrote V`` after each write to LOG, until the test SIGKILLs it.
"""

from __future__ import annotations

import json
import os
import random
import sys

from memstrata.memory.files import FileMemory

PAD = "lorem ipsum dolor sit amet " * 6


def run_adds(worker: str, count: int) -> None:
    memory = FileMemory()
    for k in range(count):
        result = memory.add("memory", f"w{worker}-e{k}: {PAD}")
        if not result.changed:
            raise SystemExit(f"add w{worker}-e{k} reported a duplicate")


def counter_entry(worker: str, j: int, value: int) -> str:
    return f"p{worker}-c{j}=[{value}]"


def run_counters(worker: str, iterations: int, counters: int, seed: int) -> None:
    memory = FileMemory()
    rng = random.Random(seed)
    values = [0] * counters
    for j in range(counters):
        memory.add("memory", counter_entry(worker, j, 0))
    temps: list[str] = []
    next_temp = 0
    for _ in range(iterations):
        roll = rng.random()
        if roll < 0.6:
            j = rng.randrange(counters)
            old = counter_entry(worker, j, values[j])
            memory.replace("memory", old, counter_entry(worker, j, values[j] + 1))
            values[j] += 1
        elif roll < 0.8 or not temps:
            text = f"p{worker}-tmp-{next_temp} {PAD[:40]}"
            next_temp += 1
            memory.add("memory", text)
            temps.append(text)
        else:
            text = temps.pop(rng.randrange(len(temps)))
            memory.remove("memory", text)
    print(json.dumps({"counters": values, "temps": temps}))


def run_crash(name: str, log_path: str) -> None:
    memory = FileMemory()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(log, b"ready\n")

    def entry(value: int) -> str:
        return f"{name}=[{value}] {PAD}"

    os.write(log, b"about 0\n")
    memory.add("memory", entry(0))
    os.write(log, b"wrote 0\n")
    value = 0
    while True:
        os.write(log, f"about {value + 1}\n".encode())
        memory.replace("memory", f"{name}=[{value}]", entry(value + 1))
        value += 1
        os.write(log, f"wrote {value}\n".encode())


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "adds":
        run_adds(args[0], int(args[1]))
    elif mode == "counters":
        run_counters(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif mode == "crash":
        run_crash(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
