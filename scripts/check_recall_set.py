#!/usr/bin/env python3
"""Checks tests/data/recall_set.json, the recall-by-meaning test set: a "meaning" question must
share no content word with its target fact (so that only meaning, not keywords, can find it),
and a "keyword" question must share at least one. An optional list `unanswerable` holds
questions that no fact answers ({"q", "lang"}), for choosing a similarity floor.

    python3 scripts/check_recall_set.py [tests/data/recall_set.json]

English: lowercase, split on non-alphanumerics, drop stopwords (function words only), and compare
crude stems (plural, -ing, -ed, -ly stripped; "run"/"running" or "month"/"monthly" count as
shared), and a stem of 4+ letters that begins another counts too ("vet"/"vets",
"pass"/"passport"). Chinese: any Chinese character in both counts, except 我 的 是 吗 什 么 哪.
Exits 1 listing every violation, and on a malformed set.
"""

import json
import re
import sys
from pathlib import Path

STOPWORDS = set(
    """
    a an the is am are was were be been being do does did done i me my mine we us our ours you
    your yours he him his she her hers it its they them their what which who whom whose when
    where why how that this these those there here of to in on at for with by from about into
    over under up out off as than then so and or but if not no nor s t d ll ve re can could
    shall should will would must may might much many any some all also just very too
    """.split()
)
ZH_ALLOWED = set("我的是吗什么哪")
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def stem(word):
    for suffix in ("ing", "ed", "es", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    # running -> runn -> run, shopped -> shopp -> shop
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


def en_words(text):
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def en_shared(q, fact):
    """The content words of `q` that `fact` shares, as `q-word~fact-word`."""
    shared = set()
    for a in en_words(q):
        for b in en_words(fact):
            sa, sb = stem(a), stem(b)
            short, long_ = sorted((sa, sb), key=len)
            if sa == sb or (len(short) >= 4 and long_.startswith(short)):
                shared.add(a if a == b else f"{a}~{b}")
    return sorted(shared)


def zh_shared(q, fact):
    chars = set(CJK.findall(q)) & set(CJK.findall(fact))
    # Latin words mixed into Chinese text count too.
    return sorted(chars - ZH_ALLOWED) + en_shared(CJK.sub(" ", q), CJK.sub(" ", fact))


def check(data):
    problems = []
    facts = data.get("facts")
    questions = data.get("questions")
    if not isinstance(facts, list) or not isinstance(questions, list):
        return ["the set must be an object with lists `facts` and `questions`"]
    by_key = {}
    for i, f in enumerate(facts):
        if not isinstance(f, dict) or not isinstance(f.get("key"), str) or not f.get("text"):
            problems.append(f"facts[{i}]: needs a string `key` and a non-empty `text`")
            continue
        if f["key"] in by_key:
            problems.append(f"facts[{i}]: key {f['key']!r} is used twice")
        by_key[f["key"]] = f["text"]
    for i, q in enumerate(questions):
        where = f"questions[{i}] {q.get('q')!r}" if isinstance(q, dict) else f"questions[{i}]"
        if not isinstance(q, dict) or not q.get("q"):
            problems.append(f"{where}: needs a non-empty `q`")
            continue
        fact = by_key.get(q.get("fact"))
        if fact is None:
            problems.append(f"{where}: `fact` {q.get('fact')!r} is no fact's key")
            continue
        lang, kind = q.get("lang"), q.get("kind")
        if lang not in ("en", "zh"):
            problems.append(f"{where}: `lang` must be en or zh")
            continue
        if kind not in ("meaning", "keyword"):
            problems.append(f"{where}: `kind` must be meaning or keyword")
            continue
        has_cjk = bool(CJK.search(q["q"])) and bool(CJK.search(fact))
        if has_cjk != (lang == "zh"):
            problems.append(f"{where}: `lang` is {lang}, but the question or its fact is not")
        shared = (zh_shared if lang == "zh" else en_shared)(q["q"], fact)
        if kind == "meaning" and shared:
            problems.append(f"{where}: shares {', '.join(shared)} with {q['fact']}: {fact!r}")
        if kind == "keyword" and not shared:
            problems.append(f"{where}: a keyword question shares no word with {fact!r}")
    # Optional: questions no fact answers (for a similarity floor), a list of {"q", "lang"}.
    for i, q in enumerate(data.get("unanswerable", [])):
        if not isinstance(q, dict) or not q.get("q") or q.get("lang") not in ("en", "zh"):
            problems.append(f"unanswerable[{i}]: needs a non-empty `q` and `lang` en or zh")
    return problems


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/recall_set.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        sys.exit(f"check_recall_set: cannot read {path}: {e}")
    problems = check(data)
    for p in problems:
        print(f"check_recall_set: {p}", file=sys.stderr)
    qs = data.get("questions", []) if isinstance(data, dict) else []
    count = {
        (l, k): sum(1 for q in qs if isinstance(q, dict) and (q.get("lang"), q.get("kind")) == (l, k))
        for l in ("en", "zh")
        for k in ("meaning", "keyword")
    }
    print(
        f"check_recall_set: {path}: {len(data.get('facts', []))} facts, {len(qs)} questions "
        f"(meaning en {count['en', 'meaning']} zh {count['zh', 'meaning']}, keyword en "
        f"{count['en', 'keyword']} zh {count['zh', 'keyword']}): "
        + (f"{len(problems)} problem(s)" if problems else "ok")
    )
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
