"""Context rules: what the words right before a candidate value say about it.

A number after `phone:` or `call` is a phone number; after `order #`, `id =`, in code (`x = 123`,
`f(123)`) or as an operand of `+` it is not. These rules decide between a leak and a false positive,
so every one of them matches whole words (see `whole_word`), never a piece of a longer word.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# Context around numbers

# Runs only for numbers that matched a phone or card pattern, but on every such number: string
# operations and lowercase patterns, no case-insensitive alternations (7x slower in `re`).
# `name = ` / `"name": ` right before a value; group 1 is the name, 2 and 4 the spaces, 3 the operator.
_ASSIGNED = re.compile(r"([A-Za-z_][\w.\-]*)[\"']?(\s*)(=|:|=>|:=)(\s*)[\"']?$")
_PHONE_WORDS = re.compile(
    r"tel|phone|mobile|cell|fax|call|contact|reach|sms|whats ?app|dial|telefon|téléphone|"
    r"portable|handy|móvil|cellulare|numéro|nummer|número|numero|hotline|landline"
)
_CARD_WORDS = re.compile(r"card|cc|pan|credit|debit|visa|master|amex|payment|pay")
_ID_IDENT = re.compile(
    r"(?:^|_|-|\.)(?:id|ids|uid|pid|no|nr|num|order|invoice|ticket|account|acct|ref|seed|ts|timestamp|time|"
    r"epoch|port|size|bytes|count|total|sum|max|min|len|length|hash|version|build|serial|sku|upc|ean|isbn|zip|"
    r"postal|amount|price|balance|step|steps|iter|offset|limit|nonce|block|height|lat|lon|n|x|y|z|i|j|k)(?:$|_|-)"
    r"|id$|ids$|count$|size$|bytes$|hash$"
)
# The word right before a number that makes it an id or a count ("order 5551234567", "#4821").
_ID_WORDS = frozenset(
    "id ids uid pid # no no. nr nr. num order invoice ticket account acct ref seed ts timestamp time epoch port "
    "size bytes count total sum max min len length hash version build serial sku upc ean isbn zip postal amount "
    "price balance step iter offset limit nonce block height".split()
)
_OP_AFTER = re.compile(r"\s*(?:[+*%^]|-\s|==|!=|<=|>=)")
_CLOSE_AFTER = re.compile(r"\s*[)\]]")
_LIST_ITEM = re.compile(r"\s*,")
_DIV_AFTER = re.compile(r"\s*/")


def _last_word(before: str) -> str:
    """The last whitespace-separated word of `before`, lowercased, without trailing `:`, `=`, quotes."""
    parts = before.split()
    if not parts:
        return ""
    w = parts[-1].lower().rstrip(":=\"'(")
    return w or (parts[-2].lower().rstrip(":=\"'(") if len(parts) > 1 else "")


def _context(text: str, start: int, end: int, positive: re.Pattern[str], strict: bool) -> int:
    """+1 if the value is introduced as what `positive` names, -1 if as an id, a count or an operand,
    else 0. `strict` (unformatted digit runs): also -1 when assigned in code style (`x = 123`) or
    inside brackets, where bare numbers are almost always just numbers; `key=value` and `key: value`
    (configs, logs, query strings) stay neutral."""
    before = text[max(0, start - 32):start]
    tail = before.rstrip(" \t\"'")
    last = tail[-1:]
    if last in ("=", ":", ">") and last:
        m = _ASSIGNED.search(before)
        if m:
            ident, op = m.group(1).lower(), m.group(3)
            if positive.search(ident):
                return 1
            code_style = op != ":" and m.group(2) and m.group(4)
            if _ID_IDENT.search(ident) or (strict and code_style) or _OP_AFTER.match(text, end):
                return -1
            return 0
    if positive.search(before[-20:].lower()):
        return 1
    word = _last_word(before)
    if word in _ID_WORDS or word.startswith("#") or last in ("+", "*", "%", "^", "=") or tail.endswith(" -") \
            or _OP_AFTER.match(text, end):
        return -1
    if strict and (last in ("(", "[", "/") or _CLOSE_AFTER.match(text, end) or _DIV_AFTER.match(text, end)
                   or (last == "," and _LIST_ITEM.match(text, end))):
        return -1
    return 0

