"""Secrets named by their context: credentials in URLs (`scheme://user:password@host`), values of
key-like names (`api_key=...`, `"client_secret": "..."`, `password: ...`, `Authorization: Bearer ...`,
`mysql -p'...'`) and PEM private-key blocks (whole, or truncated after the BEGIN line).

What a key-like name's value is depends on the key: a password or a named secret takes any
characters up to the next whitespace (quotes and brackets included); a token or an API key must
look random (length, character classes, entropy) and not read as code, a template or a placeholder.
Key words match as whole identifier words (`_pii_context`); generic high-entropy strings without a
key-like name are deliberately left alone (they are everywhere in code and hashes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from ._pii_checks import random_secret, secret_value_ok
from ._pii_context import WORD_END, not_secret_key, password_key, secret_key

_URL_CRED = re.compile(
    r"(?<![\w.+-])[A-Za-z][A-Za-z0-9+.\-]{1,30}://(?P<cred>[^\s:/?#@\"'<>]+:[^\s/?#\"'<>]+)@(?=[\w\[])"
)


def _url_cred_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int, str]]:
    for m in _URL_CRED.finditer(text, start, end):
        yield m.start("cred"), m.end("cred"), m.group("cred")


# Secrets named by their key: `api_key=...`, `"client_secret": "..."`, `password: ...`,
# `Authorization: Bearer ...`. The keyword is found first, then the key is widened to its word
# and the separator and value are matched from there (a pattern with a free-floating key would
# backtrack quadratically).
_SECRET_KW_SRC = (
    r"api[_-]?key|apikey|access[_-]?key|secret|token|passw(?:or)?d|passwd|pwd|pass\b|auth[_-]?key|"
    r"credentials?|private[_-]?key|session[_-]?(?:id|key)|signing[_-]?key|cookie|bearer|basic"
)
# Case-insensitive alternations are ~7x slower in `re`: search the lowercased text when lowering
# keeps offsets (it does unless the text has characters like "İ").
_SECRET_KW_LOW = re.compile(_SECRET_KW_SRC)
_SECRET_KW = re.compile("(?i)" + _SECRET_KW_SRC)
_SECRET_VALUE = re.compile(
    r"(?P<rest>[\w.-]*)[\"']?\s*(?:=|:|=>|:=)\s*(?:[\"']|(?i:bearer|token|basic)\s+)?(?P<val>[^\s\"'`]{6,200})"
)
# Whole words on the right (`api_key`, `secretKey`, `token2`; not `tokens`). On the left a key may be
# a lowercase compound that ends with the keyword (`authtoken`, `dbpassword`): see `_pii_context`.
_SECRET_KW_ENDS = re.compile(WORD_END)
_BEARER_VALUE = re.compile(r"\s+(?P<val>[A-Za-z0-9._~+/=\-]{16,})")

_TO_SPACE = re.compile(r"\S+")
# A value cannot start with these: it is the next parameter (`token=<masked JWT>&expires=3600`).
_LEADING_DELIMS = frozenset("&,;")
# A call or a subscript, whole (`get_token()`, `os.environ['KEY']`, `tokens[0]`), or a call whose
# arguments run past the value (`compute(a,`, `tokenize(pan="4111..."`): code, not a secret.
_CODE_LIKE = re.compile(r"[A-Za-z_$][\w.$]*(?:\([^()]*\)|\[[^\[\]]*\])+[\w.()\[\]]*|[A-Za-z_$][\w.$]*\([^)]*[=,\"'].*")
_GLUED_VALUE = re.compile(r"(?P<rest>[\w.-]*)[\"']?\s*(?:=|:)\s*(?P<val>\S{6,200})")


def _not_words(value: str) -> bool:
    """`k5v(6Rrp!`, `s3cr3t-x`; not `my-app-secret`."""
    return random_secret(value) or (len(value) >= 6 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


def _random_not_code(value: str) -> bool:
    return value[:1] not in _LEADING_DELIMS and not _CODE_LIKE.fullmatch(value) and random_secret(value)


def _unclosed_quotes_off(val: str) -> str:
    """Drop quotes at the end that the value does not open: they close an outer string."""
    while val and val[-1] in "\"'`" and val.count(val[-1]) % 2 == 1:
        val = val[:-1]
    return val

_VALUE_DELIMS = re.compile(r"[,;&<>(){}\[\]]")
_NEXT_PARAM = re.compile(r"&\w+=")


# `mysql -u app -p'secret' db`: the password glued to `-p` (a MySQL/MariaDB client convention).
_MYSQL_PASSWORD = re.compile(
    r"(?<![\w-])(?:mysql|mariadb|mysqldump|mysqladmin)\b[^\n]*?\s-p(?:'(?P<q1>[^'\n]+)'|\"(?P<q2>[^\"\n]+)\"|(?P<v>[^\s'\"-]\S*))"
)


# "my password is Xk9!...", "the new pwd is ...", "Passwort ist ...": a password said in prose. The
# value must not read as words (`_not_words`): "the password is wrong" stays.
# On the lowercased text (see _SECRET_KW_LOW). The first letter as a class, the lookbehind after it:
# `re` then skips ahead in C instead of trying the alternation at every position of a 4 KB text.
_PROSE_PASSWORD = re.compile(
    r"[pmcw](?<![\w-][pmcw])(?:(?<=p)(?:assword|asswort|asswd|wd|asscode|ass ?phrase)|(?<=m)ot de passe"
    r"|(?<=c)ontraseña|(?<=w)achtwoord)"
    r"\s+(?:is|was|ist|est|es|is now|is still|=)\s*:?\s*(?P<val>\S{6,200})"
)
# Where a keyword can start, relative to each occurrence of these substrings.
_PROSE_STEMS = (("pass", 0), ("passe", -7), ("pwd", 0), ("contrase", 0), ("wachtwoord", 0))


def _prose_passwords(low: str, start: int, end: int) -> Iterator[re.Match[str]]:
    """`_PROSE_PASSWORD` tried only where its keyword can start (a 4 KB text holds few "pass")."""
    for stem, back in _PROSE_STEMS:
        pos = low.find(stem, start, end)
        while pos != -1:
            if pos + back >= start:
                m = _PROSE_PASSWORD.match(low, pos + back, end)
                if m is not None:
                    yield m
            pos = low.find(stem, pos + 1, end)


def _secret_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int, str]]:
    low = text.lower()
    for pm in _prose_passwords(low, start, end) if len(low) == len(text) else ():
        val, vs = _unclosed_quotes_off(text[pm.start("val"):pm.end("val")]).rstrip(".,;!?"), pm.start("val")
        if len(val) > 2 and val[0] in "\"'`" and val[-1] == val[0]:  # quoted: the quotes are not the value
            val, vs = val[1:-1], vs + 1
        if secret_value_ok(val, True) and _not_words(val):
            yield vs, vs + len(val), val
    if "mysql" in low or "mariadb" in low:
        for pm in _MYSQL_PASSWORD.finditer(text, start, end):
            g = "q1" if pm.group("q1") else "q2" if pm.group("q2") else "v"
            yield pm.start(g), pm.end(g), pm.group(g)
    done = start
    kw_iter = _SECRET_KW_LOW.finditer(low, start, end) if len(low) == len(text) else _SECRET_KW.finditer(text, start, end)
    for m in kw_iter:
        if m.start() < done:
            continue
        kw = m.group(0).lower()
        if kw in ("bearer", "basic"):
            if m.start() > 0 and text[m.start() - 1].isalnum():
                continue
            vm = _BEARER_VALUE.match(text, m.end())
            if vm is None:
                continue
            val, vs, password_like, named_secret = vm.group("val").rstrip(".,:;!?"), vm.start("val"), False, False
        else:
            ks = m.start()
            while ks > 0 and (text[ks - 1].isalnum() or text[ks - 1] in "_.-"):
                ks -= 1
            if kw in ("pass", "pwd") and ks != m.start() and text[m.start() - 1] not in "_.-":
                continue  # "compass", not "db_pass"
            if not _SECRET_KW_ENDS.match(text, m.end()):
                continue  # "tokens", "secretary", "passwordless": the keyword must end its word
            vm = _SECRET_VALUE.match(text, m.end(), end)
            if vm is None:
                # `password={'fdp!&^@ts`, `client_secret: 23C"L9{WXu//HM"G`: a value with quotes or
                # brackets early on. Any value for a password; a random-looking one for other keys.
                gm = _GLUED_VALUE.match(text, m.end(), end)
                key = text[ks:m.end()] + (gm.group("rest") if gm else "")
                if gm is not None and not not_secret_key(key):
                    val = _unclosed_quotes_off(gm.group("val"))
                    if secret_value_ok(val, True) and (password_key(key) or (secret_key(key) and _not_words(val))
                                                       or _random_not_code(val)):
                        done = gm.start("val") + len(val)
                        yield gm.start("val"), done, val
                continue
            key = text[ks:m.end()] + vm.group("rest")
            if not_secret_key(key):
                continue
            val, vs = vm.group("val"), vm.start("val")
            # A secret's value is taken like a password's (any characters, to the next space) but
            # must look random or hold a digit.
            named_secret = secret_key(key) and not password_key(key)
            password_like = password_key(key) or named_secret
            quoted = text[vs - 1] in "\"'"
            if quoted:  # the quotes delimit the value: keep every character
                done = vs + len(val)
                if secret_value_ok(val, password_like, quoted=True) and (not named_secret or _not_words(val)):
                    yield vs, vs + len(val), val
                continue
            if password_like:
                # Unquoted, a password runs to the next whitespace: `password=ZD"(wOQ~(` is one value.
                # A quote at its end that it does not open closes an outer string (`"pw=abc1"`).
                full = _TO_SPACE.match(text, vs, end)
                if full is not None:
                    val = _unclosed_quotes_off(full.group(0))
                cut = _NEXT_PARAM.search(val)  # ?password=...&user=...
                if cut and cut.start():
                    val = val[:cut.start()]
                val = val.rstrip(".,:;!?")
                for close, open_ in ((")", "("), ("]", "["), ("}", "{")):
                    if val.endswith(close) and open_ not in val:
                        val = val[:-1]
            else:
                # A random secret with punctuation in it (`client_secret: k;X(2]v~Qz!`): the whole
                # run to the next whitespace, unless it reads as code (a call or a subscript).
                full = _TO_SPACE.match(text, vs, end)
                whole = _unclosed_quotes_off(full.group(0)) if full is not None else val
                nxt = _NEXT_PARAM.search(whole)  # ?api_key=...&page=2
                if nxt and nxt.start():
                    whole = whole[:nxt.start()]
                whole = whole.rstrip(".,:;!?")
                if (whole != val or _VALUE_DELIMS.search(whole)) and _random_not_code(whole) \
                        and secret_value_ok(whole, True):
                    done = vs + len(whole)
                    yield vs, done, whole
                    continue
                cut = _VALUE_DELIMS.search(val)
                if cut:
                    if val[cut.start()] in "([":  # a call or subscript: code, not a value
                        continue
                    val = val[:cut.start()]
                val = val.rstrip(".,:;!?")
        done = vs + len(val)
        if secret_value_ok(val, password_like) and (not named_secret or _not_words(val)):
            yield vs, vs + len(val), val
        elif not password_like and _random_not_code(val) and secret_value_ok(val, True):
            # A short random token (`api_key: EUP~|aMD?mQGQ`, `token: Dk3jp3##FN`): under 16
            # characters it needs three character classes and the entropy of a random string.
            yield vs, vs + len(val), val


_PEM_BEGIN = re.compile(r"-----BEGIN (?P<label>[A-Z0-9]+(?: [A-Z0-9]+)* )?PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+(?: [A-Z0-9]+)* )?PRIVATE KEY-----")
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=\s:,.\-]*)")
# A truncated block: lines of base64 (and "Proc-Type: ..." headers) after the BEGIN line, nothing further.
_PEM_TRUNCATED = re.compile(r"(?:[ \t]*\r?\n(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\n]*))*(?:[ \t]*\r?\n[A-Za-z0-9+/=]+)?")


def _pem_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int, str]]:
    pos = start
    while True:
        m = _PEM_BEGIN.search(text, pos, end)
        if m is None:
            return
        e = _PEM_END.search(text, m.end(), end)
        body = _PEM_BODY.match(text, m.end(), e.start() if e else end)
        if e is not None and body is not None and body.end() == e.start():
            stop = e.end()
        else:
            t = _PEM_TRUNCATED.match(text, m.end(), end)
            stop = t.end() if t else m.end()
        yield m.start(), stop, text[m.start():stop]
        pos = stop
