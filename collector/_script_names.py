"""Person names in scripts without capital letters: Arabic, Persian, Hebrew, Devanagari, Bengali, Tamil,
Thai, Georgian, Hangul, Chinese and Japanese.

The name model (`_name_model`) starts from capitalized words, so it never looks at "أحمد حسن",
"राहुल वर्मा", "김민준" or "王小明". Here a name is found by its parts being names, from Faker's name
lists of those languages (`SCRIPT_NAME_LOCALES`; Faker is already what the model is trained with):

- words separated by spaces (Arabic, Hebrew, Indic, Thai, Georgian): a run of known first or last names,
  with the particles between them (آل, بن, أبو), and after a known first name an Arabic "al-" family
  name ("خالد العتيبي"); or two or three words standing on their own as a field value, one of them a
  known name ("לקוח: יוסי כהן,", "assignee=اكرام آل البدر");
- Hangul: a word that is a known surname and a known given name ("김민준"), or a known given name next to
  a known surname ("현서 신");
- Han and kana: a known surname then a given name (or two short words, one a known surname: "山田 太郎")
  standing on its own between punctuation or spaces, two to four characters ("王小明", "陳怡君").

Deliberately not here: names in Cyrillic, Greek and Armenian (they have capitals, the model reads them),
transliterated names (Latin script, the model's), and any name none of whose parts is in the lists: a
word of these scripts carries no sign of being a name other than the lists.
"""

from __future__ import annotations

import importlib
import re
import threading

#: Faker locales whose first and last names this detector knows (the model's own gazetteers are Latin).
SCRIPT_NAME_LOCALES = ("ar_AA", "ar_PS", "ar_SA", "fa_IR", "he_IL", "hi_IN", "bn_BD", "ne_NP", "mr_IN", "gu_IN",
                       "ta_IN", "or_IN", "si_LK", "th_TH", "ka_GE", "ko_KR", "ja_JP", "zh_CN", "zh_TW")

Span = tuple[int, int, str]

# Letters of the scripts above (a character class: Arabic, Hebrew, Indic, Thai, Georgian, Hangul, CJK, kana).
_SCRIPT = ("\u0590-\u05ff\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\u0900-\u0dff\u0e00-\u0e7f\u10a0-\u10ff"
           "\u1100-\u11ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\u200c\u200d")
_ANY = re.compile(f"[{_SCRIPT}]")
# Punctuation and digits inside those blocks (Arabic comma and question mark, danda, Arabic-Indic,
# Devanagari, Bengali and Thai digits) end a word.
_NOT_LETTER = ("\u060c\u061b\u061f\u066a-\u066d\u06d4\u0660-\u0669\u06f0-\u06f9\u0964-\u096f\u09e6-\u09ef"
               "\u0e50-\u0e59\u3000-\u303f")
_WORD = re.compile(f"(?:(?![{_NOT_LETTER}])[{_SCRIPT}])+")
_HAN_KANA = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_ARABIC = re.compile(r"[\u0600-\u06ff]")
# Words that open a place, not a name, before an "al-" word: street, road, square, quarter, city, palace, garden.
_NOT_GIVEN = frozenset({"شارع", "طريق", "ساحة", "نهج", "حي", "جادة", "زقاق", "ميدان", "درب", "مدينة", "قصر", "حديقة",
                        "جبل", "وادي", "بني", "خیابان", "کوچه", "بلوار", "میدان"})
# Han words ending like a place are places: 市 city, 区 ward, 県 prefecture, 路 road, 号 number, ...
_PLACE_ENDINGS = frozenset("市区區県都道府町村省州郡路街道号號巷弄丁目番地")
_HIRAGANA = re.compile(r"[\u3040-\u309f]")
_ARABIC_PARTICLES = frozenset({"آل", "بن", "ابن", "بنت", "أبو", "ابو", "عبد", "ال"})
# Honorifics after a name in Japanese and Korean ("山田 太郎 様", "김민준 님") are not part of it.
_HONORIFICS = ("さん", "先生", "女士", "様", "殿", "님", "씨")


def _words(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [str(k) for k in obj]
    if isinstance(obj, (list, tuple)):
        return [str(x) for x in obj]
    return []


class ScriptNames:
    """Finds PERSON spans in the scripts of the module docstring (gazetteers read once from Faker)."""

    def __init__(self) -> None:
        first: set[str] = set()
        last: set[str] = set()
        for loc in SCRIPT_NAME_LOCALES:
            try:
                person = importlib.import_module(f"faker.providers.person.{loc}").Provider
            except ImportError:
                continue
            for attr in ("first_names", "first_names_male", "first_names_female"):
                for n in _words(getattr(person, attr, ())):
                    first.update(n.split())
            for attr in ("last_names", "last_names_male", "last_names_female"):
                for n in _words(getattr(person, attr, ())):
                    last.update(n.split())
        self.first = frozenset(w for w in first if _ANY.search(w))
        self.last = frozenset(w for w in last if _ANY.search(w))
        self.names = self.first | self.last
        self.surname_chars = frozenset(w for w in self.last if len(w) <= 2 and _HAN_KANA.match(w) or
                                       (len(w) == 1 and _HANGUL.match(w)))

    @staticmethod
    def applies(text: str) -> bool:
        """Whether `text` has a letter of these scripts at all (most text has none: nothing to do)."""
        return _ANY.search(text) is not None

    def find(self, text: str) -> list[Span]:
        """PERSON spans, sorted, non-overlapping."""
        words = [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(text)]
        out: list[Span] = []
        i = 0
        while i < len(words):
            j = self._name_run(text, words, i)
            if j is not None:
                out.append((words[i][0], words[j][1], "PERSON"))
                i = j + 1
            else:
                i += 1
        return out

    def _name_run(self, text: str, words: list[tuple[int, int, str]], i: int) -> int | None:
        """Index of the last word of a name starting at word i, or None."""
        s, e, w = words[i]
        if _HAN_KANA.match(w):
            return self._han_name(text, words, i)
        if _HANGUL.match(w):
            return self._hangul_name(text, words, i)
        if w not in self.names:
            return self._field(text, words, i)
        j = i
        while j + 1 < len(words) and _adjacent(text, words[j], words[j + 1]):
            nxt = words[j + 1][2]
            if nxt in self.names:
                j += 1
            elif nxt in _ARABIC_PARTICLES and j + 2 < len(words) and _adjacent(text, words[j + 1], words[j + 2]):
                j += 2
            elif nxt.startswith("ال") and len(nxt) > 3 and words[j][2] in self.first:
                j += 1  # "al-" family name after a first name: "خالد العتيبي"
            else:
                break
        field = self._field(text, words, i)
        return max(j, field) if field is not None else j

    def _field(self, text: str, words: list[tuple[int, int, str]], i: int) -> int | None:
        """A field value: two or three words from word i on, with nothing else of the script right before
        or after them (punctuation, a Latin word, the text's ends), one of them a known name or particle:
        "לקוח: יוסי כהן,", "assignee=اكرام آل البدر reporter". The other words of a name given on its own
        are names too, known or not."""
        def spaced(a: int, b: int) -> bool:  # a field's words are separated by one space, nothing else
            return text[words[a][1]:words[b][0]] == " "

        if i and spaced(i - 1, i):
            return None
        j = i
        while j + 1 < len(words) and spaced(j, j + 1) and j - i < 3:
            j += 1
        if j - i > 2 or j == i or (j + 1 < len(words) and spaced(j, j + 1)):
            return None
        if _HAN_KANA.match(words[j][2]) or _HANGUL.match(words[j][2]):
            return None
        parts = [words[t][2] for t in range(i, j + 1)]
        if any(p in self.names or p in _ARABIC_PARTICLES for p in parts):
            return j
        # A given name and an "al-" family name on their own: "هشام العلي", "اكرام المطيري".
        if len(parts) == 2 and _ARABIC.match(parts[0]) and not parts[0].startswith("ال") and parts[1].startswith("ال") \
                and len(parts[1]) > 3 and parts[0] not in _NOT_GIVEN:
            return j
        return None

    def _han_part(self, w: str) -> bool:
        """A word that can be half of a Han/kana name: a known name, or one to three Han or katakana
        characters that do not end like a place ("熊本市")."""
        if w in self.names:
            return True
        return 1 <= len(w) <= 3 and not _HIRAGANA.search(w) and bool(_HAN_KANA.match(w)) and w[-1] not in _PLACE_ENDINGS

    def _surname(self, w: str) -> bool:
        return w in self.last or w[:1] in self.surname_chars or w[:2] in self.surname_chars

    def _hangul_name(self, text: str, words: list[tuple[int, int, str]], i: int) -> int | None:
        w = words[i][2]
        if 2 <= len(w) <= 4 and w[0] in self.last and w[1:] in self.first:
            return i  # "김민준"
        if i + 1 < len(words) and _adjacent(text, words[i], words[i + 1]):
            nxt = words[i + 1][2]
            if (w in self.first and nxt in self.last) or (w in self.last and nxt in self.first):
                return i + 1  # "현서 신", "김 민준"
            if (len(w) == 1 and w in self.last and len(nxt) == 2) or (len(nxt) == 1 and nxt in self.last and len(w) == 2):
                return i + 1  # a one-syllable surname and a two-syllable given name, either order
        return None

    def _han_name(self, text: str, words: list[tuple[int, int, str]], i: int) -> int | None:
        s, e, w = words[i]
        w = _without_honorific(w)
        # Two short words with a space between them, one a known surname and the other a name too:
        # "山田 太郎", "志远 屠" (not "お客様 山田": hiragana is grammar, not names, unless a list has it).
        if i + 1 < len(words) and _adjacent(text, words[i], words[i + 1], comma=True):
            nxt = _without_honorific(words[i + 1][2])
            if self._han_part(w) and self._han_part(nxt) and (self._surname(w) or self._surname(nxt)) \
                    and len(w) + len(nxt) <= 4:
                return i + 1
        # On its own, two to four characters, a known surname first: "王小明", "陳怡君".
        if 2 <= len(w) <= 4 and w[-1] not in _PLACE_ENDINGS and (w in self.names or self._surname(w)):
            if _stands_alone(text, s, s + len(w)) and (w in self.names or len(w) <= 3):
                return i
        return None


def _without_honorific(w: str) -> str:
    for h in _HONORIFICS:
        if w.endswith(h) and len(w) > len(h):
            return w[:-len(h)]
    return w


def _adjacent(text: str, a: tuple[int, int, str], b: tuple[int, int, str], comma: bool = False) -> bool:
    """Two words separated by exactly one space (with `comma`, also by a comma and a space: "满, 思宇")."""
    gap = text[a[1]:b[0]]
    return gap == " " or (comma and gap == ", ")


def _stands_alone(text: str, s: int, e: int) -> bool:
    """Nothing of the same kind of word touches `text[s:e]`: punctuation, spaces or the ends around it."""
    before = text[s - 1] if s > 0 else " "
    after = text[e] if e < len(text) else " "
    return not _WORD.match(before) and (not _WORD.match(after) or text[e:e + 1] in _HONORIFICS
                                        or text[e:e + 2] in _HONORIFICS)


_script_names: ScriptNames | None = None
_lock = threading.Lock()


def script_names() -> ScriptNames:
    """The process-wide detector (Faker's name lists are read on first use)."""
    global _script_names
    if _script_names is None:
        with _lock:
            if _script_names is None:
                _script_names = ScriptNames()
    return _script_names
