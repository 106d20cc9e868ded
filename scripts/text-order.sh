#!/usr/bin/env bash
# Writes scripts/text-order.txt: the functions a release binary runs as a daemon (start-up with
# the model server down and up, idle, tasks over the HTTP API, the dashboard, /metrics, a stop)
# and as one-shot commands (`run`, `tasks list`, `--help`, `--version`), with the repository's
# tools, for the default build and for `--no-default-features` (features change symbols' names),
# the default build's first. build.rs hands the file to the linker, which puts those functions
# first and together (BENCHMARKS.md §24, §25).
#
# Run it again after a toolchain update, a change to Cargo.lock, to the features or to the
# release profile (its per-crate `opt-level`s too), or a large refactor: the file names symbols
# as one build names them, and names that no longer match only cost memory. Needs valgrind,
# python3, curl and nm (`apt-get install -y valgrind`); takes two release builds (≈ 30 min from
# empty on 2 cores, a few minutes each when only the link is left) and a minute or two of
# valgrind. TEXT_ORDER_BINS="DEFAULT NODEFAULT" records from binaries
# already built with `HERMES_KEEP_SYMBOLS=1 cargo build --release` instead of building them.
#
# `scripts/text-order.sh --check` records nothing: it says how many of the file's functions the
# two builds of today's code still define, and exits 1 below TEXT_ORDER_MIN percent (default
# 90): the file is stale, record it again. Needs only nm and the two builds.
set -euo pipefail

check=false
[ "${1:-}" = --check ] && check=true

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools=(valgrind python3 curl nm)
$check && tools=(python3 nm)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || {
        echo "text-order: $tool is missing (apt-get install -y valgrind python3 curl binutils)" >&2
        exit 1
    }
done

work=$(mktemp -d)
model_pid=""
daemon_pid=""
cleanup() {
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

bins=()
if [ -n "${TEXT_ORDER_BINS:-}" ]; then
    read -r -a bins <<< "$TEXT_ORDER_BINS"
else
    target=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    # The same builds as the release ones with their symbols kept: only the link differs.
    for features in default no-default; do
        flags=()
        [ "$features" = no-default ] && flags=(--no-default-features)
        HERMES_KEEP_SYMBOLS=1 HERMES_TEXT_ORDER=off cargo build --release --bin hermes-agent "${flags[@]}"
        cp "$target/release/hermes-agent" "$work/hermes-agent-$features"
        bins+=("$work/hermes-agent-$features")
    done
fi

if $check; then
    for bin in "${bins[@]}"; do
        nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }'
    done | sort -u > "$work/defined"
    sort -u scripts/text-order.txt > "$work/ordered"
    total=$(wc -l < "$work/ordered")
    found=$(comm -12 "$work/ordered" "$work/defined" | wc -l)
    percent=$((total ? found * 100 / total : 0))
    echo "text-order: $found of $total functions in scripts/text-order.txt are defined by today's builds ($percent %)"
    if [ "$percent" -lt "${TEXT_ORDER_MIN:-90}" ]; then
        echo "text-order: the order file is stale; run scripts/text-order.sh to record it again" >&2
        exit 1
    fi
    exit 0
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
model_port=$(free_port)
api_port=$(free_port)

# A model that asks for `recall` once, then answers: the path every task takes.
cat > "$work/model.py" <<'PY'
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Model(BaseHTTPRequestHandler):
    def log_message(self, *args): pass
    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "text-order"}]})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        messages = request.get("messages", [])
        if any(m.get("role") in ("tool", "assistant") for m in messages) or not request.get("tools"):
            message, finish = {"role": "assistant", "content": "Sunny, as remembered."}, "stop"
        else:
            # A built-in of each kind: memory, the scheduler, working memory.
            text = json.dumps(messages)
            name, args = ("list_schedules", {}) if "(2)" in text else \
                ("read_working_memory", {}) if "(3)" in text else ("recall", {"query": "weather"})
            call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        self.reply({"id": "1", "object": "chat.completion", "model": "scripted",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 10, "total_tokens": 910}})
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Model).serve_forever()
PY
python3 "$work/model.py" "$model_port" &
model_pid=$!

cat > "$work/settings.yaml" <<YAML
model:
  profiles:
    fast: {base_url: "http://127.0.0.1:$model_port/v1", model: scripted, timeout_s: 60}
    pro: {base_url: "http://127.0.0.1:$model_port/v1", model: scripted, timeout_s: 60}
tools:
  manifests_dir: "$root/tools"
scheduler:
  timezone: UTC
server:
  port: $api_port
YAML
# The same with the model server down (nothing listens on that port): a daemon often starts
# before its model server does, and its first look at the model takes the error paths.
sed "s#127.0.0.1:$model_port#127.0.0.1:$(free_port)#" "$work/settings.yaml" > "$work/down.yaml"

# record BIN DIR: runs BIN's daemon and one-shot commands under callgrind, writing its profiles
# and the functions BIN defines into DIR.
record() {
    local bin=$1 out=$2
    local vg=(valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out/callgrind.%p")
    local hermes=("$bin" --config "$work/settings.yaml" --data-dir "$out/data")
    local api="http://127.0.0.1:$api_port"
    "${vg[@]}" "$bin" --config "$work/down.yaml" --data-dir "$out/down" serve >"$out/down.log" 2>&1 &
    daemon_pid=$!
    # The daemon's log line for a model it cannot reach (surfaces/src/eval/watch.rs): its look
    # is done.
    local looked=""
    for _ in $(seq 600); do
        grep -q "cannot tell which model the profile serves" "$out/down.log" && looked=1 && break
        kill -0 "$daemon_pid" 2>/dev/null || { cat "$out/down.log" >&2; exit 1; }
        sleep 0.2
    done
    [ -n "$looked" ] ||
        echo "text-order: the daemon never said it could not reach the model; recorded anyway" >&2
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    "${vg[@]}" "${hermes[@]}" serve >"$out/serve.log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 600); do
        curl -fs -o /dev/null -m 2 "$api/healthz" && break
        kill -0 "$daemon_pid" 2>/dev/null || { cat "$out/serve.log" >&2; exit 1; }
        sleep 0.2
    done
    for i in 1 2 3; do
        curl -fs -m 30 -H 'content-type: application/json' \
            -d "{\"task\":\"What is the weather? ($i)\"}" "$api/v1/tasks" >/dev/null
    done
    curl -fs -m 60 -H 'content-type: application/json' \
        -d '{"task":"What is 17 * 23? (2)","wait":true}' "$api/v1/tasks" >/dev/null
    for _ in $(seq 300); do
        busy=$(curl -fs -m 10 "$api/healthz" |
            python3 -c 'import json,sys; h=json.load(sys.stdin); print(h["pending"]+h["running"])' 2>/dev/null || echo 1)
        [ "$busy" = 0 ] && break
        sleep 0.2
    done
    for path in /v1/tasks / /tasks /jobs /metrics; do
        curl -s -o /dev/null -m 30 "$api$path" || true
    done
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    daemon_pid=""
    "${vg[@]}" "${hermes[@]}" run "What is the weather?" >/dev/null 2>&1
    "${vg[@]}" "${hermes[@]}" run "What is 17 * 23? (2)" >/dev/null 2>&1
    "${vg[@]}" "${hermes[@]}" --version >/dev/null 2>&1
    "${vg[@]}" "${hermes[@]}" tasks list >/dev/null 2>&1
    "${vg[@]}" "${hermes[@]}" --help >/dev/null 2>&1
    nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }' > "$out/defined"
}

n=0
for bin in "${bins[@]}"; do
    n=$((n + 1))
    mkdir -p "$work/$n"
    record "$bin" "$work/$n"
done

# Every function callgrind saw that its binary defines, each once, in the order given.
python3 - "$work" "$n" > scripts/text-order.txt <<'PY'
import glob, os, re, sys
work, count = sys.argv[1], int(sys.argv[2])
seen = {}
for n in range(1, count + 1):
    run = os.path.join(work, str(n))
    defined = set(open(os.path.join(run, "defined")).read().split())
    for path in sorted(glob.glob(os.path.join(run, "callgrind.*")), key=os.path.getmtime):
        names = {}
        for line in open(path, errors="replace"):
            m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if not m:
                continue
            kind, ident, name = m.groups()
            if name:
                names[ident] = name
            if kind == "fn" and names.get(ident) in defined:
                seen.setdefault(names[ident], None)
print("\n".join(seen))
PY
echo "text-order: $(wc -l < scripts/text-order.txt) functions in scripts/text-order.txt; build again (cargo build --release) to use them"
