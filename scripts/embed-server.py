#!/usr/bin/env python3
"""An OpenAI-compatible embeddings server around wordllama, a real (small, static) embedding
model whose PyPI wheel ships its weights, for the recall-by-meaning tests. Fully offline.

    target/test-deps/embed-venv/bin/python scripts/embed-server.py --port 0 [--host 127.0.0.1]
        [--api-key KEY] [--max-chars 4000] [--max-batch 2048] [--delay-ms 0] [--cache-dir DIR]

(the venv comes from `bash scripts/ci/embed-deps.sh`). Once bound it prints one line,
`listening on HOST:PORT`, to stdout.

Endpoints, as OpenAI's:
  POST /v1/embeddings  {"model": M, "input": str | [str], "encoding_format"?: "float"|"base64",
                        "dimensions"?: int}
  GET  /v1/models
Models: `wordllama-256` (256 dimensions) and `wordllama-128` (wordllama's own truncation to the
first 128, which its matryoshka training makes meaningful). Every vector is unit length.

Errors, as OpenAI's {"error": {"message", "type", "param", "code"}}: 401 without
`Authorization: Bearer KEY` when --api-key is given; 404 for an unknown model or path; 400 for
bad JSON, an empty input list or an empty string, a non-string input, more than --max-batch
inputs, or an input longer than --max-chars characters (code `input_too_long`).

It logs the request line and status only (to stderr), never the texts.
"""

import argparse
import base64
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Never reach a hub: everything the model needs is in the wheel and the cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import numpy as np
except ImportError:  # reported by main() with what to run, once wordllama fails to import too
    np = None

TOKENIZER = "l2_supercat_tokenizer_config.json"
MODELS = {"wordllama-256": 256, "wordllama-128": 128}


def default_cache_dir():
    """Next to the venv this runs in (target/test-deps/wordllama-cache), else a temp dir."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix).parent / "wordllama-cache"
    return Path(tempfile.gettempdir()) / "hermes-wordllama-cache"


def prepare_cache(cache):
    """Copy the wheel's tokenizer where wordllama's loader looks for it (it expects
    `tokenizer/`, the wheel has `tokenizers/`, and the cache is searched under `tokenizers/`),
    through a temporary file so that a server starting meanwhile never reads half of it."""
    import wordllama

    shipped = Path(wordllama.__file__).parent / "tokenizers" / TOKENIZER
    for sub in ("tokenizers", "tokenizer"):
        target = cache / sub / TOKENIZER
        if target.is_file() and target.stat().st_size == shipped.stat().st_size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TOKENIZER + ".")
        os.close(fd)
        shutil.copyfile(shipped, tmp)
        os.replace(tmp, target)


class Model:
    def __init__(self, name, wl):
        self.name = name
        self.wl = wl
        self.dims = wl.embedding.shape[1]

    def embed(self, texts, dimensions=None):
        """Unit vectors (float32) and the number of tokens read."""
        tokens = sum(sum(e.attention_mask) for e in self.wl.tokenize(texts))
        vectors = self.wl.embed(texts, norm=False)
        if dimensions is not None:
            vectors = vectors[:, :dimensions]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # A text of no tokens pools to zeros: leave it zeros rather than NaN.
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        return vectors.astype(np.float32), int(tokens)


def load_models(cache):
    from wordllama import WordLlama

    models = {}
    for name, dims in MODELS.items():
        trunc = None if dims == 256 else dims
        wl = WordLlama.load(cache_dir=cache, disable_download=True, dim=256, trunc_dim=trunc)
        models[name] = Model(name, wl)
    return models


class ApiError(Exception):
    def __init__(self, status, message, code=None, param=None, kind="invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


def make_handler(models, args):
    # The tokenizer and numpy are shared by the server's threads; an embedding takes a few
    # milliseconds, so one at a time is simplest (the --delay-ms wait is outside the lock).
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hermes-embed-server/1"
        # Headers and body go out as two writes: without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every small answer.
        disable_nagle_algorithm = True

        def log_message(self, format, *a):  # the request line and status only, never bodies
            sys.stderr.write("embed-server: %s\n" % (format % a))

        def send_json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def check_key(self):
            if args.api_key is None:
                return
            if self.headers.get("Authorization", "") != "Bearer " + args.api_key:
                raise ApiError(
                    401,
                    "Incorrect API key provided: send `Authorization: Bearer KEY`.",
                    code="invalid_api_key",
                )

        def read_raw(self):
            """The whole body, read before anything is answered, so that a kept-alive
            connection stays in step whatever the answer."""
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = 0
            self.raw = self.rfile.read(length) if length > 0 else b""

        def read_body(self):
            try:
                body = json.loads(self.raw)
            except ValueError:
                raise ApiError(400, "The request body is not valid JSON.") from None
            if not isinstance(body, dict):
                raise ApiError(400, "The request body must be a JSON object.")
            return body

        def handle_api(self, route):
            try:
                if args.delay_ms > 0:
                    time.sleep(args.delay_ms / 1000)
                self.check_key()
                status, body = route()
            except ApiError as e:
                status, body = e.status, e.body
            self.send_json(status, body)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self.handle_api(self.list_models)
            else:
                self.not_found()

        def do_POST(self):
            self.read_raw()
            if self.path.rstrip("/") == "/v1/embeddings":
                self.handle_api(self.embeddings)
            else:
                self.not_found()

        def not_found(self):
            self.send_json(
                404,
                ApiError(404, f"Unknown request URL: {self.command} {self.path}.").body,
            )

        def list_models(self):
            data = [
                {"id": name, "object": "model", "created": 0, "owned_by": "wordllama"}
                for name in MODELS
            ]
            return 200, {"object": "list", "data": data}

        def embeddings(self):
            body = self.read_body()
            name = body.get("model")
            if not isinstance(name, str) or not name:
                raise ApiError(400, "You must provide a model parameter.", param="model")
            model = models.get(name)
            if model is None:
                raise ApiError(
                    404,
                    f"The model `{name}` does not exist; this server has {', '.join(MODELS)}.",
                    code="model_not_found",
                    param="model",
                )
            texts = body.get("input")
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ApiError(
                    400, "`input` must be a string or a list of strings.", param="input"
                )
            if not texts:
                raise ApiError(400, "`input` must not be an empty list.", param="input")
            if len(texts) > args.max_batch:
                raise ApiError(
                    400,
                    f"Too many inputs: {len(texts)}, at most {args.max_batch} in one request.",
                    param="input",
                )
            for i, t in enumerate(texts):
                if not t:
                    raise ApiError(400, f"input[{i}] is an empty string.", param="input")
                if len(t) > args.max_chars:
                    raise ApiError(
                        400,
                        f"input[{i}] is too long: {len(t)} characters, and this model reads at "
                        f"most {args.max_chars}; cut it and send it again.",
                        code="input_too_long",
                        param="input",
                    )
            dimensions = body.get("dimensions")
            if dimensions is not None and (
                not isinstance(dimensions, int)
                or isinstance(dimensions, bool)
                or not 1 <= dimensions <= model.dims
            ):
                raise ApiError(
                    400,
                    f"`dimensions` must be an integer from 1 to {model.dims} for {name}.",
                    param="dimensions",
                )
            encoding = body.get("encoding_format") or "float"
            if encoding not in ("float", "base64"):
                raise ApiError(
                    400, "`encoding_format` must be `float` or `base64`.", param="encoding_format"
                )
            with lock:
                vectors, tokens = model.embed(texts, dimensions)
            data = []
            for i, v in enumerate(vectors):
                if encoding == "base64":
                    embedding = base64.b64encode(v.astype("<f4").tobytes()).decode()
                else:
                    embedding = v.tolist()
                data.append({"object": "embedding", "index": i, "embedding": embedding})
            return 200, {
                "object": "list",
                "data": data,
                "model": name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument("--api-key", help="require `Authorization: Bearer KEY`")
    p.add_argument("--max-chars", type=int, default=4000, help="longest input, in characters")
    p.add_argument("--max-batch", type=int, default=2048, help="most inputs in one request")
    p.add_argument("--delay-ms", type=int, default=0, help="wait this long on every request")
    p.add_argument("--cache-dir", type=Path, help="where the tokenizer copy goes")
    args = p.parse_args()

    cache = (args.cache_dir or default_cache_dir()).resolve()
    try:
        prepare_cache(cache)
        models = load_models(cache)
    except Exception as e:  # say what to do, not just a traceback
        sys.exit(
            f"embed-server: cannot load wordllama ({type(e).__name__}: {e}); install it with "
            "`bash scripts/ci/embed-deps.sh` and run this with target/test-deps/embed-venv/bin/python"
        )

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        daemon_threads = True
        # Tests open many connections at once; the default backlog of 5 makes the rest retry
        # their SYN a second later.
        request_queue_size = 128

    server = Server((args.host, args.port), make_handler(models, args))
    host, port = server.server_address[:2]
    print(f"listening on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
