"""What a detected value is replaced with: a placeholder, a keyed pseudonym, or a format-preserving fake.

- `placeholder` (default): `<EMAIL_1>`, numbered per trajectory. Nothing about the value survives.
- `hmac`: `<EMAIL_3f9a1c2b>`, the first 8 hex digits of HMAC-SHA256(key, kind + normalized value).
  The same value gets the same pseudonym in every trajectory (joins across trajectories keep
  working), and without the key nobody can test a guess ("is it alice@example.com?").
- `fake`: a value of the same kind and shape, drawn from a generator seeded by that HMAC: an e-mail
  at example.com/.net/.org, a phone number with the same separators and country code, a
  Luhn-valid card with the same issuer prefix and grouping, an IBAN with valid check digits, a
  name with the same number of words and the same capitalization. Deterministic for a value and a
  key; the fake can collide with a real value, which is why placeholders are the default.

Normalization is the detector's (`Entity` keys): e-mails case-insensitively, phones and cards by
their digits, so formatting variants of one value share a pseudonym.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import random
import re
import string

MODES = ("placeholder", "hmac", "fake")

FIRST_NAMES = (
    "Alex", "Sam", "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Avery", "Quinn", "Robin", "Charlie",
    "Emma", "Liam", "Olivia", "Noah", "Ava", "Elias", "Mia", "Lucas", "Sofia", "Leon", "Clara", "Hugo", "Lena",
    "Mateo", "Nora", "Felix", "Ida", "Oscar", "Alma", "Emil", "Ines", "Jonas", "Lea", "Milan", "Rosa", "Theo",
    "Vera", "Anton", "Elena", "Marco", "Julia", "Paul", "Sara", "David", "Anna", "Tomas", "Maya", "Victor",
    "Hanna", "Adrian", "Lina", "Martin", "Eva", "Nils", "Greta", "Pablo", "Lucia", "Arthur", "Chloe", "Simon",
    "Zoe", "Daniel", "Iris", "Kai", "Amelie", "Ruben", "Lisa", "Oliver", "Mila", "Henry", "Alice", "Max",
)
LAST_NAMES = (
    "Smith", "Meyer", "Garcia", "Rossi", "Novak", "Jansen", "Silva", "Martin", "Dubois", "Nielsen", "Kowalski",
    "Berg", "Costa", "Fischer", "Lopez", "Moreau", "Weber", "Bianchi", "Larsen", "Peeters", "Horvat", "Santos",
    "Schulz", "Ferrari", "Lambert", "Hansen", "Wagner", "Romero", "Bakker", "Fontaine", "Keller", "Russo",
    "Lindqvist", "Walsh", "Brennan", "Okafor", "Tanaka", "Park", "Nguyen", "Haddad", "Kovacs", "Popescu",
    "Andersen", "Vogel", "Marino", "Ortega", "Visser", "Laurent", "Koch", "Greco", "Holm", "Murphy", "Castro",
    "Richter", "Conti", "Mercier", "Dijkstra", "Eriksen", "Nowak", "Ruiz", "Lehmann", "Gallo", "Roux", "Brandt",
)
STREETS = (
    "Maple", "Oak", "Cedar", "Elm", "Willow", "Birch", "Linden", "Harbor", "Mill", "Station", "Park", "Garden",
    "River", "Lake", "Hill", "Church", "School", "Market", "Meadow", "Orchard", "Bridge", "Spring", "Forest",
)
STREET_TYPES = ("Street", "Avenue", "Road", "Lane", "Drive", "Way", "Court", "Place")
CITIES = ("Springfield", "Riverton", "Fairview", "Lakeside", "Greenville", "Milford", "Oakdale", "Brookfield",
          "Westfield", "Kingston", "Ashford", "Clayton", "Hillcrest", "Newport", "Bayside", "Northwood")
FAKE_EMAIL_DOMAINS = ("example.com", "example.net", "example.org")
_KEY_PREFIXES = re.compile(
    r"^(?:sk-proj-|sk-ant-[a-z0-9]+-|sk-|sk_live_|rk_live_|gh[pousr]_|github_pat_|glpat-|AKIA|ASIA|xox[abpr]-|AIza|"
    r"hf_|npm_|pypi-)"
)
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December")


def hmac_digest(key: bytes, kind: str, value: str) -> bytes:
    return hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).digest()


def hmac_pseudonym(key: bytes, kind: str, value: str) -> str:
    """`<KIND_xxxxxxxx>`: 8 hex digits of HMAC-SHA256(key, kind, value)."""
    return f"<{kind}_{hmac_digest(key, kind, value).hex()[:8]}>"


def _same_shape(rng: random.Random, s: str) -> str:
    """Each digit, lowercase and uppercase letter replaced by a random one of its class; the rest kept."""
    out = []
    for ch in s:
        if ch.isdigit():
            out.append(rng.choice(string.digits))
        elif "a" <= ch <= "z":
            out.append(rng.choice(string.ascii_lowercase))
        elif "A" <= ch <= "Z":
            out.append(rng.choice(string.ascii_uppercase))
        else:
            out.append(ch)
    return "".join(out)


def _replace_digits(rng: random.Random, s: str, keep: int = 0, nonzero_first: bool = False) -> str:
    """Replace every digit after the first `keep` digits; separators stay where they were."""
    out, seen = [], 0
    for ch in s:
        if ch.isdigit():
            if seen < keep:
                out.append(ch)
            elif nonzero_first and seen == keep:
                out.append(rng.choice("23456789"))
            else:
                out.append(rng.choice(string.digits))
            seen += 1
        else:
            out.append(ch)
    return "".join(out)


def _luhn_check_digit(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def _fake_card(rng: random.Random, s: str) -> str:
    digits = [c for c in s if c.isdigit()]
    n = len(digits)
    new = digits[:4] + [rng.choice(string.digits) for _ in range(n - 5)]
    new.append(_luhn_check_digit("".join(new)))
    it = iter(new)
    return "".join(next(it) if c.isdigit() else c for c in s)


def _fake_iban(rng: random.Random, s: str) -> str:
    compact = s.replace(" ", "")
    bban = _same_shape(rng, compact[4:])
    moved = bban + compact[:2] + "00"
    check = 98 - int("".join(str(int(ch, 36)) for ch in moved)) % 97
    new = f"{compact[:2]}{check:02d}{bban}"
    it = iter(new)
    return "".join(next(it) if c != " " else c for c in s)


def _fake_phone(rng: random.Random, s: str) -> str:
    stripped = s.lstrip()
    if stripped.startswith("+"):
        m = re.match(r"\+\d{1,3}", stripped)
        keep = len(m.group(0)) - 1 if m else 0
        return _replace_digits(rng, s, keep=keep, nonzero_first=True)
    if stripped.startswith("00"):
        m = re.match(r"00\d{1,3}", stripped)
        return _replace_digits(rng, s, keep=len(m.group(0)) if m else 2, nonzero_first=True)
    if stripped.lstrip("(").startswith("0"):  # national: keep the trunk 0
        return _replace_digits(rng, s, keep=1, nonzero_first=True)
    if stripped.startswith("1") and len([c for c in s if c.isdigit()]) == 11:
        return _replace_digits(rng, s, keep=1, nonzero_first=True)
    return _replace_digits(rng, s, nonzero_first=True)  # NANP area codes start 2-9


def _fake_ssn(rng: random.Random, s: str) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    group, serial = rng.randrange(1, 100), rng.randrange(1, 10000)
    new = f"{area:03d}{group:02d}{serial:04d}"
    it = iter(new)
    return "".join(next(it) if c.isdigit() else c for c in s)


def _fake_date(rng: random.Random, s: str) -> str:
    """Same layout; a year between 1940 and 2005; day and month both <= 12, so either order is valid."""
    year = rng.randrange(1940, 2006)

    def repl(m: re.Match[str]) -> str:
        g = m.group(0)
        if len(g) == 4:
            return str(year)
        if len(g) == 2 and m.start() > 0 and re.search(r"\d{1,2}\D+\d{1,2}\D+$", s[:m.start()]):
            return f"{year % 100:02d}"  # two-digit year in last position
        v = rng.randrange(1, 13)
        return f"{v:0{len(g)}d}"

    out = re.sub(r"\d+", repl, s)

    def month(m: re.Match[str]) -> str:
        word = m.group(0)
        name = rng.choice(_MONTH_NAMES)
        name = name[:len(word)] if len(word) <= 4 else name
        return name.upper() if word.isupper() else name if word[0].isupper() else name.lower()

    return re.sub(r"[A-Za-zÀ-ÿ]{3,}", month, out)


def _case_like(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like.islower():
        return word.lower()
    return word


def _fake_person(rng: random.Random, s: str) -> str:
    words = s.split()
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    if "," in s and len(words) >= 2:  # "Last, First"
        out = [f"{last},", first]
    elif len(words) <= 1:
        out = [first]
    elif len(words) == 2:
        out = [first, last]
    else:
        out = [first, rng.choice(string.ascii_uppercase) + "."] + [last]
    like = next((w for w in words if w[:1].isalpha()), s)
    return " ".join(_case_like(w, like) for w in out)


def _fake_address(rng: random.Random, s: str) -> str:
    street = f"{rng.randrange(1, 999)} {rng.choice(STREETS)} {rng.choice(STREET_TYPES)}"
    if "\n" in s:
        return f"{street}\n{rng.randrange(10000, 99999)} {rng.choice(CITIES)}"
    if "," in s:
        return f"{street}, {rng.choice(CITIES)}"
    return street


def _fake_email(rng: random.Random, s: str) -> str:
    local = f"{rng.choice(FIRST_NAMES).lower()}.{rng.choice(LAST_NAMES).lower()}{rng.randrange(1, 100)}"
    return f"{local}@{rng.choice(FAKE_EMAIL_DOMAINS)}"


def _fake_ipv4(rng: random.Random, _s: str) -> str:
    return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def _fake_ipv6(rng: random.Random, _s: str) -> str:
    # The documentation prefix 2001:db8::/32: never routed, still an IPv6 address.
    return str(ipaddress.IPv6Address((0x20010DB8 << 96) | rng.getrandbits(96)))


def _fake_url_credentials(rng: random.Random, s: str) -> str:
    user, _, password = s.partition(":")
    return f"{rng.choice(FIRST_NAMES).lower()}{rng.randrange(10, 99)}:{_same_shape(rng, password)}"


def _fake_key(rng: random.Random, s: str) -> str:
    m = _KEY_PREFIXES.match(s)
    prefix = m.group(0) if m else ""
    return prefix + _same_shape(rng, s[len(prefix):])


def _fake_jwt(rng: random.Random, s: str) -> str:
    parts = s.split(".")
    alphabet = string.ascii_letters + string.digits + "-_"
    out = []
    for i, p in enumerate(parts):
        body = "".join(rng.choice(alphabet) for _ in range(len(p)))
        out.append("eyJ" + body[3:] if i < 2 and len(p) > 3 else body)
    return ".".join(out)


def _fake_private_key(rng: random.Random, s: str) -> str:
    lines = s.split("\n")
    return "\n".join(line if line.startswith("-----") else _same_shape(rng, line) for line in lines)


_FAKERS = {
    "EMAIL": _fake_email,
    "PHONE": _fake_phone,
    "CREDIT_CARD": _fake_card,
    "IBAN": _fake_iban,
    "SSN": _fake_ssn,
    "DOB": _fake_date,
    "IPV4": _fake_ipv4,
    "IPV6": _fake_ipv6,
    "URL_CREDENTIALS": _fake_url_credentials,
    "API_KEY": _fake_key,
    "SECRET": _same_shape,
    "JWT": _fake_jwt,
    "PRIVATE_KEY": _fake_private_key,
    "PERSON": _fake_person,
    "ADDRESS": _fake_address,
}


def fake_value(key: bytes, kind: str, normalized: str, original: str, salt: int = 0) -> str:
    """A fake of the same kind and shape as `original`, deterministic in (key, kind, normalized, salt)."""
    digest = hmac_digest(key, kind, normalized if not salt else f"{normalized}\x00{salt}")
    rng = random.Random(int.from_bytes(digest, "big"))
    fn = _FAKERS.get(kind)
    if fn is None:
        return f"<{kind}_{digest.hex()[:8]}>"
    return fn(rng, original)
