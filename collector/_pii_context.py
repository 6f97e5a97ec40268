"""Context rules: what the words around a candidate value say about it.

A number after `phone:` or `call` is a phone number; after `order #`, `id =`, in code (`x = 123`,
`f(123)`) or as an operand of `+` it is not; four numbers after `version` are a version, not an
IPv4 address; `password=` makes the value after it a secret, `password_policy=` does not.

These rules decide between a leak and a false positive, so every one of them matches whole words,
never a piece of a longer word: "server 10.2.3.4" once lost its IP address because "server" ends
in "ver". Words are delimited the way identifiers are: by anything that is not a letter (spaces,
punctuation, `_`, `-`, `.`, digits) and by a lowercase-to-uppercase step (`mobilePhone`,
`userId`). Two helpers say it once: `word_pattern` (a regex alternation with those boundaries) and
`ident_words` (an identifier split into its words). The one deliberate exception is the compound
secret key written as one lowercase word (`authtoken`, `dbpassword`), which counts when it *ends*
with a secret word (`_pii_detectors`); the negative rules never match inside a word.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Identifier-aware word boundaries, usable inside case-insensitive patterns too ((?-i:...)).
# Left: no letter before, or a lowercase letter/digit before an uppercase one (camelCase).
# Right: no letter after, or an uppercase letter after a lowercase one.
WORD_START = r"(?-i:(?<![^\W\d_])|(?<=[a-z0-9])(?=[A-Z]))"
WORD_END = r"(?-i:(?![^\W\d_])|(?<=[a-z])(?=[A-Z]))"


def word_pattern(words: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
    """`words` (a regex alternation) matched as whole words only (case-insensitive by default)."""
    return re.compile(WORD_START + "(?:" + words + ")" + WORD_END, flags)


_IDENT_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_A-Za-z]+")


@lru_cache(maxsize=4096)  # keys and identifiers repeat across texts
def ident_words(ident: str) -> tuple[str, ...]:
    """`userId` -> [user, id]; `HTTPServer_v2` -> [http, server, v, 2]; `max-tokens` -> [max, tokens]."""
    return tuple(w.lower() for w in _IDENT_WORD.findall(ident))


# ---------------------------------------------------------------------------------------------
# Context around numbers

# `name = ` / `"name": ` right before a value; group 1 is the name, 2 and 4 the spaces, 3 the operator.
_ASSIGNED = re.compile(r"([A-Za-z_][\w.\-]*)[\"']?(\s*)(=|:|=>|:=)(\s*)[\"']?$")
PHONE_WORDS = word_pattern(
    r"tel|tel\.|tél|tlf|telephone|téléphone|phones?|phone ?(?:no|nr|number)|ph|mob|mobile|cell|cellphone|"
    r"cellular|fax|calls?|called|calling|contacts?|reach|sms|text|whats ?app|dial|telefon|telefonnummer|"
    r"teléfono|telefono|portable|handy|handynummer|móvil|movil|cellulare|numéro|nummer|número|numero|hotline|"
    r"landline|helpline|(?:my|your|his|her|our|their|new|old|same) (?:new |old |mobile |cell |home |work |private )?number"
)
CARD_WORDS = word_pattern(
    r"cards?|cc|ccn|ccnum|pan|credit|creditcard|debit|debitcard|visa|mastercard|master|amex|payments?|pay|paid|"
    r"charged?|charging"
)
# Words of an identifier that make the number assigned to it an id, a count or a measurement.
_ID_IDENT_WORDS = frozenset(
    "id ids uid pid no nr num order invoice ticket account acct ref seed ts timestamp time epoch port size bytes "
    "count total sum max min len length hash version build serial sku upc ean isbn zip postal amount price "
    "balance step steps iter offset limit nonce block height lat lon n x y z i j k".split()
)
# The same as lowercase compounds (`userid`, `orderno`): only these exact words, never a suffix match
# ("paid", "android" and "david" end in "id" too).
_ID_IDENT_COMPOUNDS = frozenset(
    "userid orderid accountid customerid clientid sessionid requestid traceid spanid itemid productid ticketid "
    "invoiceid txid tid guid uuid oid pid uid gid msgid messageid jobid runid taskid eventid orderno ordernr "
    "invoiceno accountno rowcount itemcount filesize".split()
)
# The word right before a number that makes it an id or a count ("order 5551234567", "#4821").
_ID_WORDS = frozenset(
    "id ids uid pid # no no. nr nr. num order invoice ticket account acct ref seed ts timestamp time epoch port "
    "size bytes count total sum max min len length hash version build serial sku upc ean isbn zip postal amount "
    "price balance step iter offset limit nonce block height".split()
)
# The word right before four dotted numbers that makes them a version, not an IPv4 address.
VERSION_WORDS = frozenset({"v", "v.", "ver", "ver.", "version", "versions", "release", "rel", "rel."})
_OP_AFTER = re.compile(r"\s*(?:[+*%^]|-\s|==|!=|<=|>=)")
_CLOSE_AFTER = re.compile(r"\s*[)\]]")
# A number in a list of numbers (`[4155552671, 4155552672]`), not a field of a CSV row of mixed values.
_LIST_ITEM = re.compile(r"\s*,\s*[-+(]?[0-9]")
_LIST_BEFORE = re.compile(r"[0-9)]\s*,\s*$")
_FIELD_SEPARATORS = frozenset("|;,\t")
_DIV_AFTER = re.compile(r"\s*/")


def last_word(before: str) -> str:
    """The last whitespace-separated word of `before`, lowercased, without trailing `:`, `=`, quotes.

    Whole words only: a caller compares it for equality, so "server" is never "ver". A word cut by
    the window's left edge is longer than any word it is compared with."""
    parts = before.split()
    if not parts:
        return ""
    w = parts[-1].lower().rstrip(":=\"'(")
    return w or (parts[-2].lower().rstrip(":=\"'(") if len(parts) > 1 else "")


@lru_cache(maxsize=4096)  # keys and identifiers repeat across texts
def id_like(ident: str) -> bool:
    """Does the identifier name an id, a count or a measurement (`user_id`, `orderNo`, `max_len`)?"""
    words = ident_words(ident)
    return any(w in _ID_IDENT_WORDS for w in words) or "".join(words) in _ID_IDENT_COMPOUNDS


def context(text: str, start: int, end: int, positive: re.Pattern[str], strict: bool) -> int:
    """+1 if the value is introduced as what `positive` names, -1 if as an id, a count or an operand,
    else 0. `strict` (unformatted digit runs): also -1 when assigned in code style (`x = 123`) or
    inside brackets, where bare numbers are almost always just numbers; `key=value` and `key: value`
    (configs, logs, query strings) stay neutral."""
    lo = max(0, start - 32)
    before = text[lo:start]
    tail = before.rstrip(" \t\"'")
    last = tail[-1:]
    if last in ("=", ":", ">") and last:
        m = _ASSIGNED.search(before)
        if m:
            ident, op = m.group(1), m.group(3)
            if positive.search(ident):
                return 1
            code_style = op != ":" and m.group(2) and m.group(4)
            if id_like(ident) or (strict and code_style) or _OP_AFTER.match(text, end):
                return -1
            return 0
    # `pos`/`endpos` on the whole text: the word-start lookbehind still sees the character before.
    if positive.search(text, max(0, start - 20), start):
        return 1
    word = last_word(before)
    if word in _ID_WORDS or word.startswith("#") or last in ("+", "*", "%", "^", "=") or tail.endswith(" -") \
            or _OP_AFTER.match(text, end):
        return -1
    if strict and (last in ("(", "[", "/") or _CLOSE_AFTER.match(text, end) or _DIV_AFTER.match(text, end)
                   or (last == "," and (_LIST_ITEM.match(text, end) or _LIST_BEFORE.search(before)))):
        return -1
    # A field of a record whose label is further back on the line: "Contact: Aleks Lepmets | 0167.3644".
    if last in _FIELD_SEPARATORS:
        far = max(0, start - 64)
        nl = text.rfind("\n", far, start)
        if positive.search(text, far if nl == -1 else nl + 1, start):
            return 1
    return 0


def after_version_word(text: str, start: int) -> bool:
    """Is the value right after `version`, `ver.`, `v`, `release` (as whole words, a colon allowed)?"""
    return last_word(text[max(0, start - 32):start]) in VERSION_WORDS


# "SSN", "social security (number)", "soc. sec.", "SS#", "tax id", "TIN", then up to 24 characters
# that are neither digits nor a line break.
SSN_CONTEXT = re.compile(
    WORD_START + r"(?:ssns?|social[ _-]?security|soc\.? ?sec\.?|ss#|sozialversicherung(?:snummer)?|"
    r"tax[ _-]?id|taxid|tin|itin)" + WORD_END + r"[^\n\d]{0,24}$",
    re.IGNORECASE,
)

# ---------------------------------------------------------------------------------------------
# Keys of secrets

# Words of a key that make it name something about a secret rather than the secret itself.
_NOT_SECRET_KEY = re.compile(
    r"(?:^|_)(?:tokeni[sz]\w*|tokens|token_?(?:type|count|id|ids|limit|len|length|usage|budget|s?_?per)|"
    r"max_?tokens?|num_?tokens?|password_?(?:field|label|policy|length|min|max|hint|reset|hash|changed))(?:_|$)"
    r"|(?:^|_)key_?(?:id|name|path|file|type|size|length|len)$|(?:^|_)secret_?(?:name|ref|path|arn)$"
    r"|^(?:has|is)_|_(?:enabled|required)$"
)


@lru_cache(maxsize=4096)  # keys and identifiers repeat across texts
def not_secret_key(key: str) -> bool:
    """`max_tokens`, `password_policy`, `is_secret`, `keyName`: a key about a secret, not holding one.
    Matched on the key's words (`redis_password` is not `is_` + `password`)."""
    return _NOT_SECRET_KEY.search("_".join(ident_words(key))) is not None


@lru_cache(maxsize=4096)  # keys and identifiers repeat across texts
def password_key(key: str) -> bool:
    """Does the key name a password (`db_pass`, `dbPassword`, `rootpassword`, `pwd`), not `bypass_token`?"""
    return any(w.startswith(("pass", "pwd")) or w.endswith(("password", "passwd", "passphrase"))
               for w in ident_words(key))


@lru_cache(maxsize=4096)  # keys and identifiers repeat across texts
def secret_key(key: str) -> bool:
    """Does the key name a secret (`client_secret`, `secretKey`, `appsecret`)? Its value may hold any
    characters, like a password's, but must not read as words (`"my-app-secret"`)."""
    return any(w.endswith("secret") for w in ident_words(key))
