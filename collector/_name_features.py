"""Word features of the name/address model: what a word looks like (shape, affixes, length,
capitalization) and which gazetteers it is in. Shared by training (`_name_train`) and inference
(`_name_model`); a change here changes what a cached model means, so bump `FEATURE_VERSION`.
"""

from __future__ import annotations

import re
import string

#: Bump when features or training data change meaning (part of the cache key).
FEATURE_VERSION = 1
OFFSETS = (-2, -1, 0, 1, 2)
KINDS = ("PERSON", "ADDRESS")

_PAD_L, _PAD_R = "\x02", "\x03"
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_HAS_DIGIT = re.compile(r"[0-9]").search
TOKEN = re.compile(r"\w+(?:['’\-]\w+)*|\n|[^\w\s]")


def _upper_class() -> str:
    """A regex character class of every uppercase letter in the BMP (Python's `re` has no \\p{Lu})."""
    ranges: list[tuple[int, int]] = []
    for cp in range(0x41, 0x10000):
        ch = chr(cp)
        if ch.isupper() and ch.isalpha():
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges) + "]"


_UPPER = _upper_class()


_SHAPE_TABLE = str.maketrans(
    string.ascii_uppercase + string.ascii_lowercase + string.digits, "X" * 26 + "x" * 26 + "d" * 10
)


def _shape(w: str) -> str:
    """`Xx`, `XX`, `d`, `Xx-Xx`, `X.`: character classes with runs collapsed, at most 8 long."""
    w = w[:16]
    if w.isascii():
        t = w.translate(_SHAPE_TABLE)
    else:
        t = "".join("X" if ch.isupper() else "x" if ch.isalpha() else "d" if ch.isdigit() else ch for ch in w)
    out = t[0]
    for ch in t[1:]:
        if ch != out[-1]:
            out += ch
    return out[:8]


class Featurizer:
    """Word -> property strings. Gazetteer sets come from the training data (`_names_data.gazetteers`)."""

    def __init__(self, gaz: dict[str, list[str]]) -> None:
        self.first = frozenset(gaz["first"])
        self.last = frozenset(gaz["last"])
        self.street = frozenset(gaz["street"])
        self.city = frozenset(gaz["city"])
        self.title = frozenset(gaz["title"])
        self.common = frozenset(gaz["common"])
        # Compound street names: "Roskothstr", "Hauptstraße", "Kungsgatan", "Olafring".
        self._street_suffixes = frozenset(s for s in self.street if len(s) >= 3)

    def props(self, w: str) -> list[str]:
        if w == _PAD_L:
            return ["<s>"]
        if w == _PAD_R:
            return ["</s>"]
        if w == "\n":
            return ["nl"]
        if len(w) > 32:  # hashes, base64, URLs: never part of a name or an address
            return ["long"]
        if len(w) > 6 and not w[0].isdigit() and not w.isalpha() and _HAS_DIGIT(w):
            return ["s=" + _shape(w), "mix"]  # ids, keys, tokens: only their shape matters
        lw = w.lower()
        out = ["s=" + _shape(w)]
        c0 = w[0]
        if len(lw) <= 24 and not (c0.isdigit() and len(lw) > 2):  # numbers: only shape and length
            out.append("w=" + lw)
        if c0.isalpha():
            n = len(lw)
            out.append("L=" + (str(n) if n < 5 else "5-7" if n < 8 else "8+"))
            if n >= 3:
                out += ["p2=" + lw[:2], "p3=" + lw[:3], "x2=" + lw[-2:], "x3=" + lw[-3:]]
                if n >= 5:
                    out.append("x4=" + lw[-4:])
            cap = "A" if w.isupper() and n > 1 else "C" if c0.isupper() else "l"
            parts = re.split(r"['’\-]", lw) if ("-" in lw or "'" in lw or "’" in lw) else [lw]
            if all(p in self.first for p in parts):
                out.append("gF" + cap)
            if all(p in self.last for p in parts):
                out.append("gL" + cap)
            if lw in self.street:
                out.append("gS" + cap)
            elif n > 5:
                suffixes = self._street_suffixes
                for k in range(3, min(n - 2, 9)):
                    if lw[-k:] in suffixes:
                        out.append("gs" + cap)
                        break
            if lw in self.city:
                out.append("gC" + cap)
            if lw in self.title:
                out.append("gT")
            if lw in self.common:
                out.append("gW" + cap)
        elif c0.isdigit():
            digits = sum(ch.isdigit() for ch in w)
            out.append("nd=" + str(min(digits, 6)))
            if digits != len(w):
                out.append("alnum")
        return out

