#!/usr/bin/env python3
"""Generate ortserve/engine_ext/src/engine/wordpiece_tables.inc, the Unicode tables of the native WordPiece tokenizer.

The tables are probed from the installed Hugging Face ``tokenizers`` itself, one code point at a time,
instead of being derived from Python's ``unicodedata``: HF classifies characters with the Unicode tables
of the Rust crates it was built with (``unicode_categories``, ``unicode-normalization-alignments``, Rust
std), which differ from Python's on newer code points, and parity with HF is the point. Each BertNormalizer
step is probed on its own (the other flags off), so the C++ side can apply any flag combination:

* clean_text: which code points are dropped, which become ' '
* handle_chinese_chars: which code points get spaces around them
* strip_accents: the NFD decomposition of each code point, which code points are nonspacing marks
  (dropped after NFD), and the canonical combining classes NFD reorders marks by
* lowercase: each code point's lowercase expansion
* BertPreTokenizer: which code points split words (removed) and which are punctuation (isolated)

Every probe is checked for the per-character assumptions the C++ code relies on; a tokenizers release that
breaks one makes this script fail. Usage: scripts/gen_wordpiece_tables.py [--check]
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import tokenizers
from tokenizers import normalizers, pre_tokenizers

OUTPUT = Path(__file__).resolve().parent.parent / "ortserve" / "engine_ext" / "src" / "engine" / "wordpiece_tables.inc"
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]  # Python strs cannot reach Rust
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3  # decomposed algorithmically in wordpiece_unicode.cc
PROBE_MARK = "\u0345"  # canonical combining class 240, the largest: NFD moves it after any mark of lower class


def _bert(*, clean_text: bool = False, chinese: bool = False, strip_accents: bool = False,
          lowercase: bool = False) -> normalizers.BertNormalizer:
    return normalizers.BertNormalizer(clean_text=clean_text, handle_chinese_chars=chinese,
                                      strip_accents=strip_accents, lowercase=lowercase)


def _hangul_nfd(c: int) -> str:
    index = c - HANGUL_FIRST
    lead, vowel, trail = 0x1100 + index // 588, 0x1161 + (index % 588) // 28, 0x11A7 + index % 28
    return chr(lead) + chr(vowel) + (chr(trail) if trail != 0x11A7 else "")


def probe() -> dict[str, object]:
    """Every table, as sets of code points and dicts of expansions."""
    clean, chinese = _bert(clean_text=True), _bert(chinese=True)
    strip, lower, nfd = _bert(strip_accents=True), _bert(lowercase=True), normalizers.NFD()
    drop: set[int] = set()
    clean_space: set[int] = set()
    cjk: set[int] = set()
    decompositions: dict[int, str] = {}
    lowercase: dict[int, str] = {}
    stripped: dict[int, str] = {}
    for c in CODE_POINTS:
        ch = chr(c)
        cleaned = clean.normalize_str(ch)
        if cleaned == "":
            drop.add(c)
        elif cleaned == " " and ch != " ":
            clean_space.add(c)
        elif cleaned != ch:
            raise AssertionError(f"clean_text maps U+{c:04X} to {cleaned!r}")
        spaced = chinese.normalize_str(ch)
        if spaced == f" {ch} ":
            cjk.add(c)
        elif spaced != ch:
            raise AssertionError(f"handle_chinese_chars maps U+{c:04X} to {spaced!r}")
        decomposed = nfd.normalize_str(ch)
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            if decomposed != _hangul_nfd(c):
                raise AssertionError(f"NFD of Hangul U+{c:04X} is {decomposed!r}, not the algorithmic one")
        elif decomposed != ch:
            decompositions[c] = decomposed
        stripped[c] = strip.normalize_str(ch)
        lowered = lower.normalize_str(ch)
        if lowered != ch:
            lowercase[c] = lowered
    # Nonspacing marks: what strip_accents removes from a code point that NFD leaves alone.
    nonspacing = {c for c in CODE_POINTS if c not in decompositions and stripped[c] == ""
                  and not HANGUL_FIRST <= c <= HANGUL_LAST}
    for c, decomposed in decompositions.items():
        if any(ord(d) in decompositions for d in decomposed):
            raise AssertionError(f"NFD of U+{c:04X} is not fully decomposed: {decomposed!r}")
        kept = "".join(d for d in decomposed if ord(d) not in nonspacing)
        if stripped[c] != kept:
            raise AssertionError(f"strip_accents of U+{c:04X} is {stripped[c]!r}, expected {kept!r}")
    # Combining classes: NFD swaps PROBE_MARK before c exactly when 0 < ccc(c) < 240. Class values are
    # stable across Unicode versions, so unicodedata's are right wherever HF's tables assign a class at all.
    ccc: dict[int, int] = {}
    for c in CODE_POINTS:
        if c == ord(PROBE_MARK):
            ccc[c] = 240
        elif nfd.normalize_str(PROBE_MARK + chr(c)) == chr(c) + PROBE_MARK:
            value = unicodedata.combining(chr(c))
            if not 0 < value < 240:
                raise AssertionError(f"NFD reorders U+{c:04X}, whose class in unicodedata is {value}")
            ccc[c] = value
    # Pre-tokenizer: in "a" + c + "a" + c' ..., whitespace is in no piece, punctuation is a piece of its own.
    split_space: set[int] = set()
    punctuation: set[int] = set()
    chunk = 4096
    for begin in range(0, len(CODE_POINTS), chunk):
        part = CODE_POINTS[begin:begin + chunk]
        text = "".join("a" + chr(c) for c in part)
        covered = [0] * len(text)
        for _piece, (start, end) in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text):
            for i in range(start, end):
                covered[i] = 1 if end - start == 1 else 2
        for i, c in enumerate(part):
            kind = covered[2 * i + 1]
            if kind == 0:
                split_space.add(c)
            elif kind == 1:
                punctuation.add(c)
    return {"drop": drop, "clean_space": clean_space, "chinese": cjk, "nonspacing": nonspacing,
            "split_space": split_space, "punctuation": punctuation, "ccc": ccc,
            "decompositions": decompositions, "lowercase": lowercase}


def _ranges(points: Iterable[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in sorted(points):
        if out and out[-1][1] + 1 == c:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(lo, hi) for lo, hi in out]


def _wrap(items: Sequence[str], indent: str = "    ", width: int = 110) -> str:
    lines: list[str] = []
    line = indent
    for item in items:
        if len(line) + len(item) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += item + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def _range_table(name: str, points: Iterable[int], what: str) -> str:
    items = [f"{{0x{lo:X}, 0x{hi:X}}}," for lo, hi in _ranges(points)]
    return f"// {what}\nconstexpr Range {name}[] = {{\n{_wrap(items)}\n}};\n"


def _mapping_table(name: str, mapping: dict[int, str], what: str) -> str:
    pool: list[int] = []
    items: list[str] = []
    for c in sorted(mapping):
        expansion = [ord(ch) for ch in mapping[c]]
        items.append(f"{{0x{c:X}, {len(pool)}, {len(expansion)}}},")
        pool.extend(expansion)
    pool_items = [f"0x{c:X}," for c in pool]
    return (f"// {what}\nconstexpr char32_t {name}Pool[] = {{\n{_wrap(pool_items)}\n}};\n"
            f"constexpr Mapping {name}[] = {{\n{_wrap(items)}\n}};\n")


def render(tables: dict[str, object]) -> str:
    ccc: dict[int, int] = tables["ccc"]  # type: ignore[assignment]
    ccc_runs: list[list[int]] = []
    for c in sorted(ccc):
        if ccc_runs and ccc_runs[-1][1] + 1 == c and ccc_runs[-1][2] == ccc[c]:
            ccc_runs[-1][1] = c
        else:
            ccc_runs.append([c, c, ccc[c]])
    ccc_items = [f"{{0x{lo:X}, 0x{hi:X}, {value}}}," for lo, hi, value in ccc_runs]
    parts = [
        f"// Generated by scripts/gen_wordpiece_tables.py from tokenizers {tokenizers.__version__}: do not edit.\n"
        "// Per-code-point behaviour of HF's BertNormalizer and BertPreTokenizer, probed from that library;\n"
        "// ranges are inclusive, every table is sorted by code point. Included by wordpiece_unicode.cc only.\n",
        f'constexpr const char* kTablesTokenizersVersion = "{tokenizers.__version__}";\n',
        _range_table("kDrop", tables["drop"], "clean_text: removed (NUL, U+FFFD, controls, format, unassigned...)"),  # type: ignore[arg-type]
        _range_table("kCleanSpace", tables["clean_space"], "clean_text: replaced by ' '"),  # type: ignore[arg-type]
        _range_table("kChinese", tables["chinese"], "handle_chinese_chars: surrounded by ' '"),  # type: ignore[arg-type]
        _range_table("kNonspacingMark", tables["nonspacing"], "strip_accents: removed after NFD"),  # type: ignore[arg-type]
        _range_table("kSplitSpace", tables["split_space"], "BertPreTokenizer: splits words, removed"),  # type: ignore[arg-type]
        _range_table("kPunctuation", tables["punctuation"], "BertPreTokenizer: a word of its own"),  # type: ignore[arg-type]
        f"// NFD canonical combining classes (nonzero only)\nconstexpr CombiningClass kCombiningClass[] = {{\n"
        f"{_wrap(ccc_items)}\n}};\n",
        _mapping_table("kDecomposition", tables["decompositions"],  # type: ignore[arg-type]
                       "NFD full decompositions, Hangul syllables excepted"),
        _mapping_table("kLowercase", tables["lowercase"], "lowercase expansions"),  # type: ignore[arg-type]
    ]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed file is out of date")
    args = parser.parse_args()
    text = render(probe())
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is out of date for tokenizers {tokenizers.__version__}; rerun {sys.argv[0]}",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
