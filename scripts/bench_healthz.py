#!/usr/bin/env python3
"""What `/healthz` costs with a long history: a data dir whose database holds 300,000 finished
tasks, a daemon on it, and the time of unauthenticated `/healthz` answers.

    cargo build --release && python3 scripts/bench_healthz.py [--bin target/release/hermes-agent] [--tasks 300000]

It also times, on the same database file with Python's sqlite3, the statement health ran before
(a count per state, which visits every task) and the one it runs now (the pending count, read
from the `tasks_by_state` index), so the difference is shown whichever binary is measured.
Requests are 0.6 s apart: the daemon answers a burst within 0.5 s from one reading, and each
request here should pay for a reading of its own. Loopback only; the model server named in the
settings is never asked (identity checks off, no task is submitted).
"""

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

SETTINGS = """model:
  identity_check_s: 0
  profiles:
    fast: {base_url: "http://127.0.0.1:9/v1", model: none, timeout_s: 5}
tools:
  manifests_dir: /nonexistent-hermes-bench-tools
server:
  port: 0
"""


def start(binary, data, config, log):
    addr = os.path.join(data, "daemon.addr")
    if os.path.exists(addr):
        os.remove(addr)
    proc = subprocess.Popen(
        [binary, "--config", config, "--data-dir", data, "serve"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("HERMES_")},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the daemon exited ({proc.returncode}); see {log.name}")
        try:
            with open(addr) as f:
                text = f.read().strip()
            if text:
                base = "http://" + text.split()[0]
                if get(base)[0].get("status"):
                    return proc, base
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("the daemon did not answer within 30 s")


def get(base):
    started = time.perf_counter()
    with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
        body = json.loads(r.read())
    return body, (time.perf_counter() - started) * 1000


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def fill(db, n):
    con = sqlite3.connect(db)
    now = "2026-12-03T00:00:00.000000Z"
    rows = (
        (uuid.uuid4().hex[:16], "succeeded" if i % 10 else "failed", "api", "fast",
         f"task {i}", "done", now, now, now)
        for i in range(n)
    )
    con.executemany(
        "INSERT INTO tasks (id, state, origin, profile, task, answer, created_at, started_at, "
        "finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()


def time_query(db, sql, runs=20):
    con = sqlite3.connect(db)
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        con.execute(sql).fetchall()
        took.append((time.perf_counter() - started) * 1000)
    con.close()
    return statistics.median(took)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/hermes-agent")
    ap.add_argument("--tasks", type=int, default=300_000)
    ap.add_argument("--requests", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        config = os.path.join(tmp, "settings.yaml")
        with open(config, "w") as f:
            f.write(SETTINGS)
        with open(os.path.join(tmp, "daemon.log"), "w") as log:
            # Once to create the database with this build's schema, then fill it offline.
            proc, _ = start(args.bin, data, config, log)
            stop(proc)
            db = os.path.join(data, "hermes.db")
            fill(db, args.tasks)
            before = time_query(db, "SELECT state, COUNT(*) FROM tasks GROUP BY state")
            after = time_query(db, "SELECT COUNT(*) FROM tasks WHERE state = 'pending'")
            proc, base = start(args.bin, data, config, log)
            try:
                took = []
                for _ in range(args.requests):
                    time.sleep(0.6)
                    body, ms = get(base)
                    took.append(ms)
                assert body["status"] in ("ok", "degraded"), body
            finally:
                stop(proc)
    took.sort()
    print(f"{args.tasks} tasks; {args.bin}")
    print(f"count per state (health before): {before:.2f} ms, median of 20 (sqlite3)")
    print(f"pending count (health now):      {after:.3f} ms, median of 20 (sqlite3)")
    print(f"/healthz: p50 {statistics.median(took):.2f} ms, max {took[-1]:.2f} ms "
          f"over {len(took)} requests")


if __name__ == "__main__":
    main()
