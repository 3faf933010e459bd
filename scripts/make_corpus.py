#!/usr/bin/env python3
"""make_corpus.py — builds the tokenizer differential/benchmark corpus, reproducibly.

Output: OUT_DIR/corpus.bin (documents concatenated) and OUT_DIR/corpus.idx (one line per document:
"offset length name"). Every document is tokenized on its own by both ds4cpp and the JS oracle
(tests/js/tokenizer_oracle.js), so document boundaries never matter for the comparison.

Sources (Debian packages listed in scripts/setup.sh, plus the repository's shared data), all taken
in sorted order with fixed byte budgets, so the same packages give the same corpus:
  English prose      /usr/share/common-licenses, English fortunes
  source code        C/C++ headers, Python stdlib, Perl modules, CMake modules, JS (tests/js)
  Chinese/Japanese   manpages-zh, manpages-ja (troff), fortunes-zh (Tang/Song poems, quotes)
  Korean             hunspell-ko word list, arranged into lines
  Italian/accented   shared/data/promessi_sposi.txt, manpages-it, fortunes-it; Russian manpages-ru
  emoji / ZWJ        unicode-data emoji-test.txt, emoji-zwj-sequences.txt, emoji-sequences.txt
  generated edges    numbers in many scripts, unusual whitespace (TAB, CRLF, space runs, NBSP,
                     U+2000..U+200A, U+3000, U+0085, U+FEFF, U+2028/9, VT, FF), combining marks,
                     random code points from every plane (seeded), special-token strings, long runs,
                     and invalid UTF-8 (lone continuation bytes, overlongs, surrogates, truncation).
Invalid UTF-8 stays in corpus.bin as raw bytes; both sides read each document with WHATWG
replacement (U+FFFD per maximal ill-formed subpart), see tokenizer_oracle.js.

Usage: scripts/make_corpus.py OUT_DIR [--mb 6]
"""
import argparse
import glob
import gzip
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
DOC_MAX = 96 * 1024  # split long sources at line boundaries into documents of at most this size


def read_bytes(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def files(pattern_list):
    out = []
    for p in pattern_list:
        out.extend(sorted(f for f in glob.glob(p, recursive=True)
                          if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat")))  # fortune indexes
    return out


class Corpus:
    def __init__(self):
        self.docs = []  # (name, bytes)

    def add(self, name, data):
        """Adds data, split into documents at line boundaries."""
        start = 0
        part = 0
        while start < len(data):
            end = min(len(data), start + DOC_MAX)
            if end < len(data):
                nl = data.rfind(b"\n", start, end)
                if nl > start:
                    end = nl + 1
            self.docs.append((f"{name}#{part}".replace(" ", "_"), data[start:end]))
            start = end
            part += 1

    def add_files(self, label, paths, budget, transform=None):
        used = 0
        for p in paths:
            if used >= budget:
                break
            try:
                data = read_bytes(p)
            except OSError:
                continue
            if transform:
                data = transform(data)
            data = data[: budget - used]
            if not data:
                continue
            self.add(f"{label}:{os.path.relpath(p, '/')}", data)
            used += len(data)
        if used == 0:
            sys.exit(f"make_corpus: no input for '{label}' — run scripts/setup.sh (missing Debian packages?)")
        return used


def korean_lines(data, rng):
    """The word list is stored as decomposed jamo (U+1100..); most lines are recomposed to syllables
    (NFC, as Korean text usually is), every 8th line keeps the jamo."""
    words = [l.split("/")[0] for l in data.decode("utf-8", "replace").splitlines()[1:]]
    words = [w for w in words if any("\u1100" <= c <= "\u11ff" or "\uac00" <= c <= "\ud7a3" for c in w)]
    step = max(1, len(words) // 40000)
    words = words[::step]
    out = []
    for k, i in enumerate(range(0, len(words), 12)):
        line = " ".join(words[i:i + 12]) + rng.choice([".", "?", "!", ",", "。", "", "…"])
        out.append(line if k % 8 == 0 else unicodedata.normalize("NFC", line))
    return ("\n".join(out) + "\n").encode("utf-8")


def generated_docs(rng):
    """Edge cases: each returns bytes (may be invalid UTF-8 on purpose)."""
    docs = {}
    # Numbers in many scripts and forms.
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯",
                  "０１２３４５６７８９", "๐๑๒๓๔๕๖๗๘๙", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃₄₅₆₇₈₉",
                  "ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩ", "①②③④⑤⑥⑦⑧⑨⑩", "½¼¾⅓⅔⅛", "〇一二三四五六七八九"]
    lines = []
    for _ in range(3000):
        ds = rng.choice(digit_sets)
        n = "".join(rng.choice(ds) for _ in range(rng.randint(1, 14)))
        sep = rng.choice([" ", ",", ".", "-", "/", ":", "", "e", "x", " + ", "%", "$", "€"])
        m = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
        lines.append(rng.choice([f"{n}{sep}{m}", f"v{m}.{n}", f"{n}{sep}{n}", f"({m})", f"{m}th", f"#{m}abc{n}"]))
    docs["numbers"] = (" ".join(lines)).encode()
    # Unusual whitespace.
    ws = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\u00a0", "\u2000",
          "\u2003", "\u2009", "\u200a", "\u3000", "\u0085", "\ufeff", "\u2028", "\u2029", "\u202f", "\u205f",
          "\u1680", "\v", "\f", "\u200b", "\u180e", " \n ", "\t \n", "  \r\n  "]
    words = ["int", "x", "Hello", "città", "世界", "カタ", "Привет", "()", "{", "};", "\"", "1234", "ü", "«»", "…"]
    parts = []
    for _ in range(20000):
        parts.append(rng.choice(ws) * rng.choice([1, 1, 1, 2, 3, 8]))
        parts.append(rng.choice(words))
    docs["whitespace"] = "".join(parts).encode()
    docs["long_runs"] = (" " * 5000 + "a" * 3000 + "\n" * 700 + "7" * 1000 + "\t" * 300 + "ab" * 2000 +
                         "😀" * 300 + "..." * 500 + " x" * 1000 + "\u3000" * 200 + "é" * 400).encode()
    # Combining marks, NFD text, scripts with marks.
    marks = ["\u0301", "\u0300", "\u0308", "\u0327", "\u20dd", "\u0489", "\u093f", "\u0e31", "\u05b7", "\u064e", "\u1dc0"]
    bases = ["e", "a", "E", " ", "1", "!", "\t", "क", "ก", "ש", "ب", "Ω", "😀", "\n", "-", "é"]
    parts = []
    for _ in range(15000):
        parts.append(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 3))))
        if rng.random() < 0.2:
            parts.append(" ")
    docs["combining"] = "".join(parts).encode()
    # Random code points from every plane (incl. unassigned, private use, noncharacters, controls).
    for k in range(4):
        cps = []
        for _ in range(20000):
            r = rng.random()
            if r < 0.3:
                cp = rng.randint(0x20, 0x7E)
            elif r < 0.6:
                cp = rng.randint(0x80, 0xFFFF)
            elif r < 0.8:
                cp = rng.randint(0x10000, 0x3FFFF)
            else:
                cp = rng.randint(0, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xFFFD
            cps.append(chr(cp))
        docs[f"random_codepoints_{k}"] = "".join(cps).encode("utf-8")
    # Every code point of the BMP once, in order (category coverage), in short lines.
    bmp = [chr(c) for c in range(0x20, 0x10000) if not 0xD800 <= c <= 0xDFFF]
    docs["bmp_all"] = "\n".join("".join(bmp[i:i + 64]) for i in range(0, len(bmp), 64)).encode("utf-8")
    # Special-token strings and near misses embedded in text.
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
                "</think>", "｜DSML｜", "<｜DSML｜tool_calls>", "</｜DSML｜parameter>", "<｜latest_reminder｜>",
                "<|EOT|>", "<｜fim▁hole｜>", "<|place_holder_mm_span_0021|>", "<｜/table>｜", "<｜place▁holder▁no▁799｜>",
                "<dsml:", "</dsml:", "<｜User", "｜>", "<think", "<<think>>", "<｜｜>", "｜"]
    parts = []
    for _ in range(6000):
        parts.append(rng.choice(specials))
        parts.append(rng.choice(["", " ", "hello", "\n", "x", "世界", "123", "<", ">"]))
    docs["special_strings"] = "".join(parts).encode()
    # ASCII punctuation/operator soup (alternative 1 and 3 of the split regex).
    punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    parts = []
    for _ in range(20000):
        parts.append("".join(rng.choice(punct) for _ in range(rng.randint(1, 4))))
        parts.append(rng.choice(["a", "Ab", "xyz", " ", "\n", "é", "1", "", "\r\n", "«", "…", "€"]))
    docs["punctuation"] = "".join(parts).encode()
    # Invalid UTF-8 mixed into text.
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xe2\x82", b"\xf0\x9f\x98",
           b"\xc3", b"\xe4\xb8", b"\xf0\x9f", b"\xef\xbb\xbf"]
    good = [b"hello", b" ", b"caf\xc3\xa9", b"\xe4\xb8\x96\xe7\x95\x8c", b"\n", b"123", b"abc", b"\xf0\x9f\x98\x80", b"!"]
    parts = []
    for _ in range(20000):
        parts.append(rng.choice(bad) if rng.random() < 0.4 else rng.choice(good))
    docs["invalid_utf8"] = b"".join(parts)
    docs["random_bytes"] = bytes(rng.getrandbits(8) for _ in range(30000))
    # A BOM at the very start of a document must be kept (TextDecoder ignoreBOM).
    docs["leading_bom"] = "\ufeffBOM first line\n\ufeff second".encode()
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--mb", type=float, default=6.0, help="approximate total size in MB (default 6)")
    args = ap.parse_args()
    scale = args.mb / 6.0
    B = lambda kb: int(kb * 1024 * scale)  # noqa: E731
    rng = random.Random(20260430)
    c = Corpus()

    strip_ansi = lambda d: d.replace(b"\x1b[", b"[")  # noqa: E731  keep the text, drop ESC
    c.add_files("license", files(["/usr/share/common-licenses/*"]), B(450))
    c.add_files("fortune-en", files([f"/usr/share/games/fortunes/{n}" for n in
                                     ["literature", "wisdom", "startrek", "people", "science", "computers",
                                      "fortunes", "humorists", "linux", "love", "pets", "songs-poems"]]), B(550))
    c.add_files("c-headers", files(["/usr/include/*.h", "/usr/include/linux/*.h"]), B(450))
    c.add_files("cpp-headers", files(["/usr/include/c++/12/bits/*.h", "/usr/include/c++/12/*"]), B(350))
    c.add_files("python", files(["/usr/lib/python3.11/*.py"]), B(450))
    c.add_files("perl", files(["/usr/share/perl/5.36/*.pm", "/usr/share/perl/5.36/*/*.pm"]), B(200))
    c.add_files("cmake", files(["/usr/share/cmake-3.25/Modules/*.cmake"]), B(150))
    c.add_files("js", files([os.path.join(ROOT, "tests/js/node_modules/openai/*.js"),
                             os.path.join(ROOT, "tests/js/node_modules/openai/**/*.mjs")]), B(200))
    c.add_files("man-zh", files(["/usr/share/man/zh_CN/man*/*.gz", "/usr/share/man/zh_TW/man*/*.gz"]), B(450))
    c.add_files("man-ja", files(["/usr/share/man/ja/man*/*.gz"]), B(450))
    c.add_files("fortune-zh", files(["/usr/share/games/fortunes/tang300", "/usr/share/games/fortunes/song100",
                                     "/usr/share/games/fortunes/chinese"]), B(250), strip_ansi)
    c.add_files("korean", files(["/usr/share/hunspell/ko.dic"]), B(300), lambda d: korean_lines(d, rng))
    c.add_files("italian", [os.path.join(SHARED, "data/promessi_sposi.txt")], B(500))
    c.add_files("man-it", files(["/usr/share/man/it/man*/*.gz"]), B(150))
    c.add_files("fortune-it", files(["/usr/share/games/fortunes/it/*"]), B(150))
    c.add_files("man-ru", files(["/usr/share/man/ru/man1/*.gz"]), B(150))
    c.add_files("emoji", files(["/usr/share/unicode/emoji/emoji-test.txt",
                                "/usr/share/unicode/emoji/emoji-zwj-sequences.txt",
                                "/usr/share/unicode/emoji/emoji-sequences.txt"]), B(300))
    for name, data in generated_docs(rng).items():
        c.add(f"gen:{name}", data)

    os.makedirs(args.out_dir, exist_ok=True)
    off = 0
    with open(os.path.join(args.out_dir, "corpus.bin"), "wb") as fb, \
         open(os.path.join(args.out_dir, "corpus.idx"), "w") as fi:
        for name, data in c.docs:
            fb.write(data)
            fi.write(f"{off} {len(data)} {name}\n")
            off += len(data)
    print(f"make_corpus: {len(c.docs)} documents, {off} bytes -> {args.out_dir}")


if __name__ == "__main__":
    main()
