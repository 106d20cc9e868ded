#!/usr/bin/env python3
"""Side by side with the leading Python peer: hermes-agent (this crate, Rust) and
hermes-agent 0.19.0 from PyPI (NousResearch, Python) run the same one-shot task against the same
scripted OpenAI-compatible model server, and this prints, for each, the request tokens of every
model call (counted by the server, the same way for both), the wall time, the CPU time and the
peak RSS, with the ratios.

    cargo build --release && python3 scripts/bench_peer.py [--runs 5]

The peer is installed with pip into a virtual environment (default /tmp/hermes-peer-venv; kept
between runs, never inside the repository). Its home is a fresh temporary HOME, so no user config
is read or written.

Loopback only: when run as root with `unshare` available, both programs and the model server run
inside a new network namespace that has nothing but `lo` (the peer probes endpoints and may try
the internet; there it cannot). Otherwise the script falls back to pointing HTTP(S)_PROXY at a
dead loopback port and says so.

The task: "What is 17 * 23? Answer with the number." The scripted model answers the first
request that offers tools with a call to a harmless listing tool that each side has
(`list_schedules` here, `skills_list` in the peer), then answers "391": two model calls each.
A request that offers no tools (an auxiliary call) is answered "391" at once and counted too.
Tokens are estimated from the raw request body exactly as the crate's `estimate_tokens` does:
one token per 4 ASCII bytes, one per other character.
"""

import argparse
import http.server
import json
import os
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEER = "hermes-agent==0.19.0"
TASK = "What is 17 * 23? Answer with the number."
ANSWER = "391"
LISTING_TOOLS = ("list_schedules", "skills_list")


def estimate_tokens(text: str) -> int:
    ascii_bytes = sum(1 for c in text if ord(c) < 128)
    other = len(text) - ascii_bytes
    return (ascii_bytes + 3) // 4 + other


# ---------------------------------------------------------------- the scripted model server


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.label = "none"
        self.calls = []

    def record(self, **row):
        with self.lock:
            row["label"] = self.label
            self.calls.append(row)

    def take(self, label):
        with self.lock:
            return [c for c in self.calls if c["label"] == label]


RECORDER = Recorder()


def decide(req):
    tools = [t.get("function", {}).get("name") for t in req.get("tools") or []]
    messages = req.get("messages") or []
    if tools and not any(m.get("role") == "tool" for m in messages):
        for name in LISTING_TOOLS:
            if name in tools:
                return {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": name, "arguments": "{}"}}]}, "tool_calls"
    return {"role": "assistant", "content": ANSWER}, "stop"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        # Model listings and lookups, which the peer probes before its first call.
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": "scripted", "object": "model", "owned_by": "bench"}]})
        elif "/models/" in self.path:
            self.send_json(200, {"id": "scripted", "object": "model", "owned_by": "bench"})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": "not found"}})
            return
        text = raw.decode("utf-8", "replace")
        try:
            req = json.loads(text)
        except ValueError as e:
            self.send_json(400, {"error": {"message": f"request body is not JSON: {e}"}})
            return
        prompt = estimate_tokens(text)
        RECORDER.record(tokens=prompt, bytes=len(raw), tools=len(req.get("tools") or []),
                        messages=len(req.get("messages") or []), stream=bool(req.get("stream")))
        message, finish = decide(req)
        usage = {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4}
        if not req.get("stream"):
            self.send_json(200, {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                                 "model": "scripted", "usage": usage, "choices": [
                                     {"index": 0, "message": message, "finish_reason": finish}]})
            return
        # Server-sent events, as OpenAI streams them.
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        delta = {"role": "assistant"}
        if message.get("tool_calls"):
            delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(message["tool_calls"])]
        else:
            delta["content"] = message["content"]

        def chunk(choices, extra=None):
            obj = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                   "model": "scripted", "choices": choices}
            if extra:
                obj.update(extra)
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())

        chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        if (req.get("stream_options") or {}).get("include_usage"):
            chunk([], {"usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


# ---------------------------------------------------------------- running one side


def timed(cmd, env, cwd, label):
    """Run cmd under /usr/bin/time -v; return (wall s, cpu s, peak RSS KiB, stdout, stderr, rc)."""
    RECORDER.label = label
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-v", "-o", tf.name] + cmd
        t0 = time.monotonic()
        p = subprocess.run(full, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
        stats = {}
        for line in Path(tf.name).read_text().splitlines():
            if ":" in line:
                k, _, v = line.strip().rpartition(": ")
                stats[k] = v
    cpu = float(stats.get("User time (seconds)", 0)) + float(stats.get("System time (seconds)", 0))
    rss = int(stats.get("Maximum resident set size (kbytes)", 0))
    RECORDER.label = "none"
    return wall, cpu, rss, p.stdout, p.stderr, p.returncode


def side(name, cmd, env, cwd, runs):
    """One warm-up run, then `runs` measured ones. Returns a summary dict or raises."""
    results = []
    for i in range(runs + 1):
        label = f"{name}-{i}"
        wall, cpu, rss, out, err, rc = timed(cmd, env, cwd, label)
        calls = RECORDER.take(label)
        if rc != 0 or ANSWER not in out:
            raise RuntimeError(f"{name}: `{' '.join(cmd)}` exited {rc}; stdout: {out[-500:]!r}; "
                               f"stderr: {err[-1500:]}")
        if i > 0:
            results.append({"wall": wall, "cpu": cpu, "rss": rss, "calls": calls})
    last = results[-1]["calls"]
    return {
        "wall": statistics.median(r["wall"] for r in results),
        "cpu": statistics.median(r["cpu"] for r in results),
        "rss": statistics.median(r["rss"] for r in results),
        "calls": last,
        "runs": runs,
    }


def ours(url, runs, work):
    binary = Path(os.environ.get("HERMES_BENCH_BIN", REPO / "target/release/hermes-agent")).resolve()
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `cargo build --release` first")
    cfg = work / "ours-settings.yaml"
    cfg.write_text(
        "model:\n  profiles:\n"
        f"    fast: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n"
        f"    pro: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n"
        # The tools shipped in the repository, so our request carries every default tool.
        f"tools:\n  manifests_dir: \"{REPO / 'tools'}\"\n")
    env = dict(os.environ, RUST_LOG="warn")
    cmd = [str(binary), "--config", str(cfg), "--data-dir", str(work / "ours-data"), "run", TASK]
    return side("ours", cmd, env, work, runs)


def peer(url, runs, work, venv):
    hermes = venv / "bin" / "hermes"
    home = work / "peer-home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), NO_COLOR="1")
    env.pop("HERMES_HOME", None)
    for key, value in (("model.provider", "custom"), ("model.base_url", url),
                       ("model.default", "scripted")):
        p = subprocess.run([str(hermes), "config", "set", key, value], env=env, cwd=home,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"`hermes config set {key} {value}` exited {p.returncode}: "
                               f"{p.stdout[-300:]} {p.stderr[-800:]}")
    return side("peer", [str(hermes), "-z", TASK], env, home, runs)


# ---------------------------------------------------------------- install, isolate, report


def install(venv):
    """Create the venv and install the peer. Returns None on success, else the failure text."""
    hermes = venv / "bin" / "hermes"
    if hermes.exists():
        return None
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "pip"), "install", "-q", PEER]]
    for cmd in steps:
        print(f"$ {' '.join(cmd)}", flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return f"`{' '.join(cmd)}` exited {p.returncode}:\n{(p.stdout + p.stderr)[-2000:]}"
    return None


def loopback_up():
    if shutil.which("ip"):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=False)


def kib_to_mb(k):
    return k / 1024


def report(o, p, peer_error):
    print("\n== side by side: one task, two model calls (a listing tool, then the answer), "
          "instant scripted model")
    print(f"   task: {TASK!r}; medians of {o['runs']} runs after one warm-up run each")
    rows = []

    def tokens(s):
        return [c["tokens"] for c in s["calls"]]

    def add(label, ov, pv, ratio=None):
        rows.append((label, ov, pv, ratio))

    add("model calls", len(o["calls"]), len(p["calls"]) if p else "-")
    add("tools offered (first call)", o["calls"][0]["tools"] if o["calls"] else 0,
        p["calls"][0]["tools"] if p and p["calls"] else "-")
    add("request tokens per call", tokens(o), tokens(p) if p else "-",
        f"{statistics.mean(tokens(p)) / statistics.mean(tokens(o)):.1f}x" if p and p["calls"] else None)
    add("request tokens, whole task", sum(tokens(o)), sum(tokens(p)) if p else "-",
        f"{sum(tokens(p)) / sum(tokens(o)):.1f}x" if p else None)
    add("wall time (s)", f"{o['wall']:.3f}", f"{p['wall']:.3f}" if p else "-",
        f"{p['wall'] / o['wall']:.1f}x" if p else None)
    add("CPU time, user+sys (s)", f"{o['cpu']:.2f}", f"{p['cpu']:.2f}" if p else "-",
        f"{p['cpu'] / max(o['cpu'], 0.01):.0f}x" if p else None)
    add("peak RSS (MB)", f"{kib_to_mb(o['rss']):.1f}", f"{kib_to_mb(p['rss']):.1f}" if p else "-",
        f"{p['rss'] / o['rss']:.1f}x" if p else None)
    print(f"   {'':32} {'hermes-agent (Rust)':>22} {'hermes-agent 0.19.0 (Py)':>26} {'peer/ours':>10}")
    for label, ov, pv, ratio in rows:
        print(f"   {label:32} {str(ov):>22} {str(pv):>26} {ratio or '':>10}")
    if peer_error:
        print(f"\n   the peer could not be measured: {peer_error}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/hermes-peer-venv"))
    ap.add_argument("--no-isolate", action="store_true",
                    help="do not enter a loopback-only network namespace")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if not args.inner:
        install_error = install(args.venv)
        if install_error:
            print(f"peer install failed: {install_error}", flush=True)
        can_isolate = (os.geteuid() == 0 and shutil.which("unshare")) and not args.no_isolate
        if can_isolate:
            cmd = ["unshare", "-n", sys.executable, __file__, "--inner",
                   "--runs", str(args.runs), "--venv", str(args.venv)]
            if install_error:
                os.environ["HERMES_PEER_INSTALL_ERROR"] = install_error
            sys.exit(subprocess.run(cmd).returncode)
        print("note: not isolated in a network namespace (needs root and unshare); "
              "HTTP(S)_PROXY points at a dead loopback port instead", flush=True)
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
            os.environ[k] = "http://127.0.0.1:9"
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
        if install_error:
            os.environ["HERMES_PEER_INSTALL_ERROR"] = install_error
    else:
        loopback_up()

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"scripted model server on {url}; load average {' '.join(load)}", flush=True)

    with tempfile.TemporaryDirectory(prefix="hermes-peer-bench-") as tmp:
        work = Path(tmp)
        o = ours(url, args.runs, work)
        p, peer_error = None, os.environ.get("HERMES_PEER_INSTALL_ERROR")
        if not peer_error:
            try:
                p = peer(url, args.runs, work, args.venv)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                peer_error = str(e)
        report(o, p, peer_error)
    server.shutdown()


if __name__ == "__main__":
    main()
