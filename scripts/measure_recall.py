#!/usr/bin/env python3
"""Measures wordllama, vectors only, on the recall set (tests/data/recall_set.json): for each
question the cosine rank of its target fact among all facts, recall@1/@3/@5 per language and
kind, and the cosine similarities a similarity floor is chosen from.

    bash scripts/ci/embed-deps.sh
    target/test-deps/embed-venv/bin/python scripts/measure_recall.py [-v] [SET]

-v prints every question with its rank and the fact ranked first.
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import json  # noqa: E402
import logging  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "target/test-deps/wordllama-cache"


def pct(v):
    v = np.asarray(v)
    return " ".join(f"p{p}={np.percentile(v, p):+.3f}" for p in (5, 25, 50, 75, 95)) + (
        f" max={v.max():+.3f}"
    )


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    verbose = "-v" in sys.argv[1:]
    data = json.loads(Path(args[0] if args else ROOT / "tests/data/recall_set.json").read_text())
    from wordllama import WordLlama

    logging.getLogger().setLevel(logging.WARNING)  # wordllama turns INFO on for everyone
    facts = data["facts"]
    keys = [f["key"] for f in facts]
    fact_lang = np.array(["zh" if any("\u4e00" <= c <= "\u9fff" for c in f["text"]) else "en"
                          for f in facts])
    questions = data["questions"]
    unanswerable = data.get("unanswerable", [])

    for dim in (256, 128):
        wl = WordLlama.load(cache_dir=CACHE, disable_download=True,
                            trunc_dim=None if dim == 256 else dim)
        F = wl.embed([f["text"] for f in facts], norm=True)
        Q = wl.embed([q["q"] for q in questions], norm=True)
        S = Q @ F.T
        print(f"== wordllama-{dim}: {len(facts)} facts, {len(questions)} questions")
        ranks = {}
        sims = {}  # (lang, what) -> values, meaning questions only
        for i, q in enumerate(questions):
            t = keys.index(q["fact"])
            s = S[i]
            order = np.argsort(-s)
            rank = int(np.where(order == t)[0][0]) + 1
            for k in ((q["lang"], q["kind"]), ("all", q["kind"])):
                ranks.setdefault(k, []).append(rank)
            if verbose and dim == 256:
                print(f"  rank {rank:2d}  cos {s[t]:+.3f}  [{q['kind']}] {q['q']}"
                      f"  -> first: {keys[order[0]]} ({s[order[0]]:+.3f})")
            if q["kind"] != "meaning":
                continue
            others = np.delete(np.arange(len(facts)), t)
            same = others[fact_lang[others] == q["lang"]]
            cross = others[fact_lang[others] != q["lang"]]
            lang = q["lang"]
            sims.setdefault((lang, "target"), []).append(s[t])
            sims.setdefault((lang, "best non-target"), []).append(s[others].max())
            sims.setdefault((lang, "unrelated, same language"), []).extend(s[same])
            sims.setdefault((lang, "unrelated, other language"), []).extend(s[cross])
        for k in sorted(ranks):
            r = np.array(ranks[k])
            print(f"  {k[0]:3} {k[1]:8} n={len(r):2}  recall@1={np.mean(r <= 1):.2f} "
                  f"@3={np.mean(r <= 3):.2f} @5={np.mean(r <= 5):.2f}")
        if unanswerable:
            U = wl.embed([q["q"] for q in unanswerable], norm=True) @ F.T
            for lang in ("en", "zh"):
                rows = [i for i, q in enumerate(unanswerable) if q["lang"] == lang]
                if rows:
                    sims[(lang, "best, unanswerable questions")] = U[rows].max(axis=1)
        print("  cosine similarities (meaning questions):")
        for lang in ("en", "zh"):
            for what in ("target", "best non-target", "unrelated, same language",
                         "unrelated, other language", "best, unanswerable questions"):
                if (lang, what) in sims:
                    print(f"    {lang} {what:29} {pct(sims[lang, what])}")
        targets = np.array(sims[("en", "target")])
        for floor in (0.10, 0.12, 0.15, 0.20):
            unrelated = np.array(sims[("en", "unrelated, same language")])
            print(f"    en floor {floor:.2f}: keeps {np.mean(targets >= floor):.0%} of targets, "
                  f"passes {np.mean(unrelated >= floor):.1%} of unrelated pairs")

    wl = WordLlama.load(cache_dir=CACHE, disable_download=True)
    batch = [f["text"] for f in facts] + [q["q"] for q in questions][: 64 - len(facts)]
    times = []
    for _ in range(50):
        t = time.perf_counter()
        wl.embed(batch, norm=True)
        times.append(time.perf_counter() - t)
    print(f"== one embed call of {len(batch)} texts: median {np.median(times) * 1000:.1f} ms, "
          f"min {min(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
