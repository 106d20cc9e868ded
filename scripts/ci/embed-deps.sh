#!/usr/bin/env bash
# Installs the real embedding model the recall-by-meaning tests run against, under
# target/test-deps (never committed): a Python venv with `wordllama` from PyPI, whose wheel ships
# its weights (`l2_supercat_256.safetensors`, 256 dimensions) and its tokenizer, so nothing is
# downloaded at run time. scripts/embed-server.py serves it over OpenAI's `/v1/embeddings`.
#
# wordllama's loader looks for the tokenizer under `tokenizer/` and in CACHE/tokenizers/, while
# the wheel ships it under `tokenizers/`, and then tries to download it: this script copies it
# into the cache (target/test-deps/wordllama-cache), where the server finds it offline.
#
# Idempotent: a second run only checks that everything is there and works. Needs python3 (3.10+)
# with venv; reaches PyPI.
#
# The embedding tests run it themselves when something is missing or this script is newer than
# its last successful run (tests/it/deps.rs, which reads the `embed-deps.ok` stamp written last).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEPS=target/test-deps
VENV=$DEPS/embed-venv
CACHE=$DEPS/wordllama-cache
# Pinned so a new release cannot change the vectors the tests see: wordllama and the packages it
# imports (numpy and tokenizers compute the vectors).
PY_PACKAGES=(wordllama==0.4.0.post1 numpy==2.4.6 tokenizers==0.23.3 safetensors==0.8.0
  pydantic==2.14.4 requests==2.34.2 toml==0.10.2)
TOKENIZER=l2_supercat_tokenizer_config.json

command -v python3 >/dev/null 2>&1 \
  || { echo "embed-deps: python3 is not installed; the embedding tests need python3 (3.10+, with venv)" >&2; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "embed-deps: $(python3 --version 2>&1) is too old; wordllama needs python3 3.10+" >&2; exit 1; }
mkdir -p "$DEPS"

if [ ! -x "$VENV/bin/python" ]; then
  echo "embed-deps: creating $VENV"
  python3 -m venv "$VENV" \
    || { echo "embed-deps: cannot create a venv at $VENV (on Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
# Installed at exactly the pinned versions? (`pip freeze` prints `name==version` lines.)
pinned=$(IFS='|'; echo "${PY_PACKAGES[*]}")
installed=$("$VENV/bin/pip" freeze 2>/dev/null | grep -cixE "$pinned" || true)
if [ "$installed" != "${#PY_PACKAGES[@]}" ]; then
  echo "embed-deps: installing ${PY_PACKAGES[*]} into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}" \
    || { echo "embed-deps: pip could not install ${PY_PACKAGES[*]} (is PyPI reachable?)" >&2; exit 1; }
fi

# The tokenizer where the loader looks for it (copied through a temporary file, so that a server
# starting meanwhile never reads half of it).
shipped=$("$VENV/bin/python" -c \
  'import pathlib, wordllama; print(pathlib.Path(wordllama.__file__).parent / "tokenizers")') \
  || { echo "embed-deps: wordllama does not import from $VENV" >&2; exit 1; }
[ -f "$shipped/$TOKENIZER" ] \
  || { echo "embed-deps: the wordllama wheel has no $shipped/$TOKENIZER (a changed wheel?)" >&2; exit 1; }
for sub in tokenizers tokenizer; do
  if ! cmp -s "$shipped/$TOKENIZER" "$CACHE/$sub/$TOKENIZER"; then
    mkdir -p "$CACHE/$sub"
    cp "$shipped/$TOKENIZER" "$CACHE/$sub/$TOKENIZER.tmp"
    mv -f "$CACHE/$sub/$TOKENIZER.tmp" "$CACHE/$sub/$TOKENIZER"
  fi
done

# Quick check that the model loads offline and embeds; the tests run the server for real.
if ! HF_HUB_OFFLINE=1 "$VENV/bin/python" - "$CACHE" <<'EOF'; then
import sys
import numpy as np
from wordllama import WordLlama

wl = WordLlama.load(cache_dir=sys.argv[1], disable_download=True)
v = wl.embed(["My car is a red Volvo", "what colour is my automobile?"], norm=True)
assert v.shape == (2, 256) and np.isfinite(v).all(), v.shape
EOF
  echo "embed-deps: wordllama does not load offline from $CACHE, or does not embed" >&2
  exit 1
fi
touch "$DEPS/embed-deps.ok"
echo "embed-deps: ready ($VENV, wordllama $("$VENV/bin/pip" freeze | grep -i '^wordllama=' | cut -d= -f3))"
