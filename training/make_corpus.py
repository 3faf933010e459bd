#!/usr/bin/env python3
"""make_corpus.py — builds the tokenized training/evaluation corpus for the tiny trained DeepSeek V4 model.

Sources (all freely licensed, see training/README.md): the King James Bible (Debian bible-kjv-text, read through
the `bible` program of bible-kjv), the fortune-mod cookie files (Debian fortunes + fortunes-min, offensive files
excluded), the Jargon File 4.4.7 (Debian jargon-text) and Manzoni's I Promessi Sposi (../shared/data).
Each corpus is split into documents; a fixed share of documents is held out for evaluation (the last books of the
Bible, the last chapter of the novel, every 25th fortune and jargon entry). Chat examples in the DeepSeek V4 chat
encoding (CHAT.md R-OFF: chat mode `<｜Assistant｜></think>` and thinking mode `<think>…</think>`) are built from
training documents only.

Output (a folder that .gitignore keeps out of git, carried to the GPU machine): little-endian uint32 token streams
`{train,eval}_{bible,fortunes,jargon,promessi,chat}.u32`, each document starting with BOS (id 0), chat examples
ending with EOS (id 1); `prompts.json` (greedy-sample prompts), `refseqs.json` (held-out sequences of 320 tokens
for the golden logits) and `manifest.json` (counts and sources).
It does not train anything and needs no GPU; tokenization runs through training/tokenize.cjs (node).
"""
import argparse
import array
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vocab  # noqa: E402

REPO = vocab.REPO
FORTUNE_DIR = "/usr/share/games/fortunes"
JARGON_GZ = "/usr/share/doc/jargon-text/jargon.txt.gz"
PROMESSI_CANDIDATES = [os.path.join(REPO, "..", "shared", "data", "promessi_sposi.txt"),
                       os.path.join(REPO, "shared", "data", "promessi_sposi.txt")]
REF_LEN = 320
HOLDOUT_EVERY = 25


def unwrap(text):
    """Joins hard-wrapped lines into one line per paragraph (paragraphs separated by blank lines)."""
    paras = re.split(r"\n\s*\n", text.strip("\n"))
    out = []
    for p in paras:
        lines = [ln.strip() for ln in p.split("\n") if ln.strip()]
        if lines:
            out.append(" ".join(lines))
    return "\n\n".join(out)


def bible_docs():
    # One document per book: "Genesis 1\n\n1 In the beginning…\n2 …\n\nGenesis 2\n\n…".
    raw = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    books, cur_book, cur = [], None, []
    for line in raw.split("\n"):
        s = line.strip()
        if not s:
            continue
        m = re.match(r"^(\d+) (.*)$", s)
        if m and line.startswith(" "):
            cur.append(s)
            continue
        # A chapter heading: "<Book name> <chapter>".
        hm = re.match(r"^(.*\S) (\d+)$", s)
        if not hm:
            raise ValueError("unexpected line from bible: " + s[:80])
        book = hm.group(1)
        if book != cur_book:
            if cur_book is not None:
                books.append((cur_book, "\n".join(cur).strip() + "\n"))
            cur_book, cur = book, []
        else:
            cur.append("")
        cur.append(s)
        cur.append("")
    books.append((cur_book, "\n".join(cur).strip() + "\n"))
    return books


def fortune_docs():
    docs = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for entry in re.split(r"\n%\n", text):
            entry = entry.strip("\n%")
            if entry.strip() and "\ufffd" not in entry:
                docs.append((name, entry.rstrip() + "\n"))
    return docs


def jargon_docs():
    with gzip.open(JARGON_GZ, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    docs, head, body = [], None, []
    for line in lines:
        m = re.match(r"^   :(.+?):(.*)$", line)
        if m:
            if head:
                docs.append((head[0], head[0] + ":" + head[1] + "\n\n" + unwrap("\n".join(body)) + "\n"))
            head, body = (m.group(1).strip(), m.group(2).rstrip()), []
        elif head is not None:
            body.append(line)
    if head:
        docs.append((head[0], head[0] + ":" + head[1] + "\n\n" + unwrap("\n".join(body)) + "\n"))
    # Drop entries whose body is empty (pure cross references rendered elsewhere).
    return [(t, d) for t, d in docs if len(d) > len(t) + 8]


def promessi_docs():
    path = next((p for p in PROMESSI_CANDIDATES if os.path.exists(p)), None)
    if path is None:
        raise FileNotFoundError("promessi_sposi.txt not found")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = re.split(r"\n\s*(?=CAPITOLO [A-Z]+\.\s*\n)", text)
    docs = []
    for i, p in enumerate(parts):
        title, _, rest = p.strip().partition("\n")
        docs.append((title.strip(), title.strip() + "\n\n" + unwrap(rest) + "\n"))
    return docs


def split_docs(name, docs):
    """Held-out documents: contiguous tail for the two books, every 25th entry for the collections."""
    if name in ("bible", "promessi"):
        total = sum(len(d) for _, d in docs)
        held, acc = [], 0
        for t, d in reversed(docs):
            if acc >= 0.025 * total:
                break
            held.append((t, d))
            acc += len(d)
        held.reverse()
        return docs[:len(docs) - len(held)], held
    train = [x for i, x in enumerate(docs) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    held = [x for i, x in enumerate(docs) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    return train, held


CONTINUE_EN = ["Continue this passage:\n\n{p}", "Continue the following text.\n\n{p}", "Please continue:\n\n{p}",
               "How does this go on?\n\n{p}", "Write the next part of this text:\n\n{p}", "{p}\n\nContinue."]
CONTINUE_IT = ["Continua questo brano:\n\n{p}", "Continua il testo:\n\n{p}", "Come prosegue?\n\n{p}",
               "Scrivi il seguito di questo brano:\n\n{p}"]
FORTUNE_ASK = ["Tell me a fortune.", "Give me a fortune cookie.", "Say something wise.", "Tell me a quote.",
               "Tell me something funny.", "Give me a quotation."]
JARGON_ASK = ["What does \"{t}\" mean?", "Define {t}.", "What is {t} in hacker jargon?", "Explain the term {t}.",
              "What does the Jargon File say about {t}?"]
SYSTEMS = ["You are a helpful assistant.", "You are a helpful assistant that continues texts.",
           "You are ds4, a small language model."]
THINK_CONT = "The user wants me to continue the passage in the same style."
THINK_CONT_IT = "The user wants me to continue the Italian passage in the same style."
THINK_FORTUNE = "The user asks for a fortune."
THINK_JARGON = "The user asks about a hacker jargon term."


def cut_words(text, start, n_chars):
    """Substring of about n_chars from start, ending at a word boundary."""
    end = min(len(text), start + n_chars)
    if end < len(text):
        sp = text.rfind(" ", start, end)
        if sp > start + n_chars // 2:
            end = sp
    return text[start:end]


def continuation(rng, text, italian):
    # A passage from the document: the prompt is its beginning, the answer what follows.
    if len(text) < 300:
        return None
    start = 0 if rng.random() < 0.3 else rng.randrange(0, max(1, len(text) - 600))
    if start:
        sp = text.find(" ", start)
        start = sp + 1 if sp >= 0 else start
    raw = cut_words(text, start, rng.randint(120, 500))
    prompt = raw.strip()
    answer = cut_words(text, start + len(raw), rng.randint(150, 700)).strip()
    if len(prompt) < 40 or len(answer) < 40:
        return None
    tmpl = rng.choice(CONTINUE_IT if italian and rng.random() < 0.7 else CONTINUE_EN)
    return tmpl.format(p=prompt), answer, THINK_CONT_IT if italian else THINK_CONT


def chat_example(rng, kind, title, text):
    if kind in ("bible", "promessi") or (kind == "jargon" and rng.random() < 0.3):
        r = continuation(rng, text, kind == "promessi")
        if r is None:
            return None
        user, answer, think = r
    elif kind == "fortunes":
        user, answer, think = rng.choice(FORTUNE_ASK), text.strip(), THINK_FORTUNE
    else:
        user, answer, think = rng.choice(JARGON_ASK).format(t=title), text.strip(), THINK_JARGON
        if len(answer) > 1500:
            answer = cut_words(answer, 0, 1500).strip()
    system = rng.choice(SYSTEMS) if rng.random() < 0.2 else ""
    thinking = rng.random() < 0.25
    return {"system": system, "user": user, "thinking": thinking, "reasoning": think if thinking else "",
            "answer": answer}


def chat_ids(ex, enc):
    ids = [vocab.BOS] + enc[ex["system"]] + [vocab.USER] + enc[ex["user"]] + [vocab.ASSISTANT]
    if ex["thinking"]:
        ids += [vocab.THINK_OPEN] + enc[ex["reasoning"]] + [vocab.THINK_CLOSE]
    else:
        ids += [vocab.THINK_CLOSE]
    return ids + enc[ex["answer"]] + [vocab.EOS]


def tokenize_all(texts):
    uniq = sorted(set(texts))
    with tempfile.TemporaryDirectory() as td:
        inp, outp = os.path.join(td, "in.json"), os.path.join(td, "out.json")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump(uniq, f, ensure_ascii=False)
        env = dict(os.environ, NODE_PATH=os.path.join(REPO, "tests/js/node_modules"))
        subprocess.run(["node", os.path.join(HERE, "tokenize.cjs"), inp, outp], check=True, env=env)
        with open(outp, encoding="utf-8") as f:
            ids = json.load(f)
    return dict(zip(uniq, ids))


def write_u32(path, ids):
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        a.tofile(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, ".device-carry", "trained"))
    ap.add_argument("--chat-examples", type=int, default=14000)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)

    corpora = {"bible": bible_docs(), "fortunes": fortune_docs(), "jargon": jargon_docs(),
               "promessi": promessi_docs()}
    splits = {k: split_docs(k, v) for k, v in corpora.items()}

    # Chat examples: training documents, weighted so that every corpus is represented.
    chat_train, chat_eval = [], []
    share = {"bible": 0.3, "promessi": 0.3, "fortunes": 0.2, "jargon": 0.2}
    for kind, frac in share.items():
        tr, ev = splits[kind]
        for target, pool, n in ((chat_train, tr, int(args.chat_examples * frac)),
                                (chat_eval, ev, max(20, int(args.chat_examples * frac / 40)))):
            made, tries = 0, 0
            while made < n and tries < n * 20:
                tries += 1
                title, text = rng.choice(pool)
                ex = chat_example(rng, kind, title, text)
                if ex:
                    target.append(ex)
                    made += 1
    rng.shuffle(chat_train)

    # Held-out chat reference sequence: a long continuation example from held-out jargon entries.
    ev_jargon = " ".join(d.replace("\n\n", " ").strip() for _, d in splits["jargon"][1][:12])
    ref_chat = {"system": "", "user": "Continue this passage:\n\n" + cut_words(ev_jargon, 0, 700).strip(),
                "thinking": False, "reasoning": "", "answer": cut_words(ev_jargon, len(cut_words(ev_jargon, 0, 700)),
                                                                         900).strip()}

    prompts_spec = [
        ("chat_en", {"system": "", "user": "Continue this passage:\n\nAnd God said unto Moses,", "thinking": False}),
        ("chat_it", {"system": "", "user": "Continua questo brano:\n\nQuel ramo del lago di Como, che volge a "
                                           "mezzogiorno,", "thinking": False}),
        ("chat_fortune", {"system": "", "user": "Tell me a fortune.", "thinking": False}),
        ("chat_jargon", {"system": "", "user": "What does \"hacker\" mean?", "thinking": False}),
        ("chat_think", {"system": "", "user": "Continue this passage:\n\nIn the beginning", "thinking": True}),
        ("raw_it", "Quel ramo del lago di Como, che volge a mezzogiorno,"),
        ("raw_en", "And it came to pass, when"),
    ]

    texts = [d for k in splits for part in splits[k] for _, d in part]
    for ex in chat_train + chat_eval + [ref_chat]:
        texts += [ex["system"], ex["user"], ex["reasoning"], ex["answer"]]
    for _, p in prompts_spec:
        texts += [p] if isinstance(p, str) else [p["system"], p["user"]]
    texts.append("")
    enc = tokenize_all(texts)

    manifest = {"seed": args.seed, "streams": {}, "documents": {}}
    for kind, (tr, ev) in splits.items():
        manifest["documents"][kind] = {"train": len(tr), "eval": len(ev),
                                       "eval_titles": [t for t, _ in ev][:10]}
        for part, docs in (("train", tr), ("eval", ev)):
            ids = []
            for _, d in docs:
                ids += [vocab.BOS] + enc[d]
            write_u32(os.path.join(args.out, f"{part}_{kind}.u32"), ids)
            manifest["streams"][f"{part}_{kind}"] = len(ids)
    for part, exs in (("train", chat_train), ("eval", chat_eval)):
        ids = []
        for ex in exs:
            ids += chat_ids(ex, enc)
        write_u32(os.path.join(args.out, f"{part}_chat.u32"), ids)
        manifest["streams"][f"{part}_chat"] = len(ids)
        manifest["documents"]["chat"] = manifest["documents"].get("chat", {})
        manifest["documents"]["chat"][part] = len(exs)

    def stream(kind):
        ids = []
        for _, d in splits[kind][1]:
            ids += [vocab.BOS] + enc[d]
        return ids

    refs = {"promessi": stream("promessi")[:REF_LEN], "bible": stream("bible")[:REF_LEN],
            "chat": chat_ids(ref_chat, enc)[:REF_LEN]}
    for k, v in refs.items():
        if len(v) < REF_LEN:
            raise ValueError(f"reference sequence {k} has only {len(v)} tokens")
    with open(os.path.join(args.out, "refseqs.json"), "w") as f:
        json.dump(refs, f)

    prompts = {}
    for name, p in prompts_spec:
        if isinstance(p, str):
            prompts[name] = [vocab.BOS] + enc[p]
        else:
            ids = [vocab.BOS] + enc[p["system"]] + [vocab.USER] + enc[p["user"]] + [vocab.ASSISTANT]
            prompts[name] = ids + ([vocab.THINK_OPEN] if p["thinking"] else [vocab.THINK_CLOSE])
    with open(os.path.join(args.out, "prompts.json"), "w") as f:
        json.dump(prompts, f)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(manifest["streams"]))


if __name__ == "__main__":
    main()
