"""Decontamination: drop training trajectories that share a word n-gram with an eval set.

The eval file is JSONL; every string inside each record counts as eval text (so `{"prompt",
"answer"}`, `{"messages": [...]}` and `{"text"}` all work). Its word n-grams (default 13, GPT-3's
choice; normalized as in `_shingle`) are hashed into sorted uint64 arrays. An eval text
shorter than n words but of at least `DECONTAM_MIN_WORDS` (8) contributes its whole word
sequence as one shorter n-gram, so a short eval question copied verbatim into a trajectory is
still caught; shorter ones ("yes", "the answer is 4") would match everything and are ignored.
A trajectory is contaminated when any of its n-grams (of any of those lengths) is in an array.

Memory is the eval set's size (8 bytes per distinct n-gram), never the export's. Hash
collisions (64-bit) are negligible at any realistic eval size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import _defaults
from ._shingle import ngram_hashes, strings_in, word_hashes
from .errors import ConfigError


class EvalIndex:
    """The n-gram hashes of an eval set; `contaminated(text)` tests a training text against them."""

    def __init__(self, texts: list[str], n: int = _defaults.DECONTAM_NGRAM,
                 min_words: int = _defaults.DECONTAM_MIN_WORDS) -> None:
        if n < 1:
            raise ConfigError(f"decontamination n-gram length must be >= 1, got {n}")
        self.n = n
        grams: dict[int, list[np.ndarray]] = {}
        for text in texts:
            w = word_hashes(text)
            if w.size >= min(n, min_words):
                k = min(n, w.size)
                grams.setdefault(k, []).append(ngram_hashes(w, k))
        self.tables = {k: np.unique(np.concatenate(v)) for k, v in grams.items()}
        self.size = sum(t.size for t in self.tables.values())

    @classmethod
    def from_jsonl(cls, path: str | Path, n: int = _defaults.DECONTAM_NGRAM) -> EvalIndex:
        """Read an eval JSONL file (one JSON value per line; blank lines skipped).

        Raises:
            ConfigError: the file is missing, unreadable, not JSONL, or holds no text.
        """
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"--decontaminate {p}: no such file; pass the eval set as JSONL (one record per line)")
        texts: list[str] = []
        try:
            with p.open(encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        texts.extend(strings_in(json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise ConfigError(f"--decontaminate {p}: line {i} is not JSON ({e.msg}); expected JSONL") from e
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--decontaminate {p}: cannot read it ({e})") from e
        index = cls(texts, n)
        if index.size == 0:
            raise ConfigError(f"--decontaminate {p}: no text of {min(n, _defaults.DECONTAM_MIN_WORDS)} words "
                              "or more found in it; expected JSONL records with string fields")
        return index

    def contaminated(self, text: str) -> bool:
        """True when `text` shares an n-gram with the eval set."""
        return self.contaminated_words(word_hashes(text))

    def contaminated_words(self, w: np.ndarray) -> bool:
        """`contaminated` for a text's `_shingle.word_hashes`."""
        for k, table in self.tables.items():
            g = ngram_hashes(w, k)
            if g.size:
                i = np.searchsorted(table, g)
                if bool((table[np.minimum(i, table.size - 1)] == g).any()):
                    return True
        return False
