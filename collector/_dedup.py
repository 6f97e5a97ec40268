"""Near-duplicate detection for a streaming export: MinHash over word shingles, LSH bands, and
one Bloom filter holding the bands of everything kept so far.

Each trajectory's text (`_shingle.trajectory_text`) becomes word 5-gram shingles; 128 MinHash
values (`(a*x + b) mod 2**32` over the shingle hashes, min over shingles) estimate Jaccard similarity; the
signature is cut into 16 bands of 8 rows. Two texts with Jaccard similarity s share at least
one band with probability 1 - (1 - s**8)**16: 0.06 at s=0.5, 0.61 at 0.7, 0.95 at 0.8, ~1 at 0.9.
A trajectory is a near-duplicate when one of its bands was seen in a trajectory kept earlier
in the export (the first one seen is kept; dropped ones add nothing).

Bounded memory: instead of bucket tables (which grow with the rows), band keys go into one Bloom
filter sized from the number of candidate rows: 32 bits per band key with 8 probes, i.e. 64
bytes per row and a false-positive rate of ~6e-6 per key (~1e-4 per trajectory). Signatures
are not kept, so candidates are not re-verified against an exact Jaccard threshold.

Exact duplicates are found in the database instead (same `content_hash`, see `_export.py`).
"""

from __future__ import annotations

import numpy as np

from . import _defaults
from ._shingle import mix64, ngram_hashes, word_hashes

_CHUNK = 2048  # shingles per MinHash block: bounds the (shingles x perms) temporary to ~2 MB


class MinHasher:
    """MinHash signatures and LSH band keys with fixed, seeded permutations."""

    def __init__(self, *, num_perm: int = _defaults.MINHASH_PERMS, bands: int = _defaults.MINHASH_BANDS,
                 shingle: int = _defaults.MINHASH_SHINGLE, seed: int = 0) -> None:
        if num_perm % bands:
            raise ValueError(f"num_perm ({num_perm}) must be a multiple of bands ({bands})")
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, 2**32, size=num_perm, dtype=np.uint32) | np.uint32(1)
        self.b = rng.integers(0, 2**32, size=num_perm, dtype=np.uint32)
        self.bands, self.rows, self.shingle = bands, num_perm // bands, shingle
        self._band_mul = mix64(np.arange(1, self.rows + 1, dtype=np.uint64))
        self._band_id = mix64(np.arange(bands, dtype=np.uint64) + np.uint64(0xB4D))

    def signature(self, words: np.ndarray) -> np.ndarray | None:
        """(num_perm,) MinHash values of `_shingle.word_hashes` output, or None for no words (fewer
        words than the shingle size are hashed as one shingle)."""
        if words.size == 0:
            return None
        # 32-bit arithmetic: half the memory traffic of 64-bit, and 32-bit minima are plenty for LSH.
        sh = ngram_hashes(words, min(self.shingle, words.size)).astype(np.uint32)
        sig = np.full(self.a.size, np.iinfo(np.uint32).max, dtype=np.uint32)
        for i in range(0, sh.size, _CHUNK):
            block = sh[i : i + _CHUNK, None] * self.a[None, :] + self.b[None, :]  # (S, P) uint32, wraps
            np.minimum(sig, block.min(axis=0), out=sig)
        return sig

    def band_keys(self, sig: np.ndarray) -> np.ndarray:
        """(bands,) uint64: one key per band, distinct across bands."""
        rows = sig.astype(np.uint64).reshape(self.bands, self.rows) * self._band_mul[None, :]  # (B, R)
        return mix64(rows.sum(axis=1, dtype=np.uint64) ^ self._band_id)


class BloomFilter:
    """A fixed-size Bloom filter over uint64 keys (power-of-two bits, double hashing)."""

    def __init__(self, expected_keys: int, *, bits_per_key: int = 32, probes: int = 8) -> None:
        nbits = max(1 << 16, int(expected_keys) * bits_per_key)
        self.mask = np.uint64((1 << (nbits - 1).bit_length()) - 1)
        self.words = np.zeros((int(self.mask) + 1) // 64, dtype=np.uint64)
        self._probe = np.arange(probes, dtype=np.uint64)

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        h2 = mix64(keys ^ np.uint64(0x5BD1E995)) | np.uint64(1)
        return (keys[:, None] + self._probe[None, :] * h2[:, None]) & self.mask  # (K, probes)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """(K,) bool: each key (probably) present; never a false negative."""
        pos = self._positions(keys)
        bits = (self.words[pos >> np.uint64(6)] >> (pos & np.uint64(63))) & np.uint64(1)
        present: np.ndarray = bits.all(axis=1)
        return present

    def add(self, keys: np.ndarray) -> None:
        """Insert `keys`."""
        pos = self._positions(keys).ravel()
        np.bitwise_or.at(self.words, (pos >> np.uint64(6)).astype(np.intp), np.uint64(1) << (pos & np.uint64(63)))

    @property
    def nbytes(self) -> int:
        """Memory held by the bit array."""
        return int(self.words.nbytes)


class NearDupFilter:
    """Streaming near-duplicate filter: `seen(text)` is True when an earlier kept text shares an LSH band."""

    def __init__(self, expected_rows: int, *, hasher: MinHasher | None = None) -> None:
        self.hasher = hasher or MinHasher()
        self.bloom = BloomFilter(max(1, expected_rows) * self.hasher.bands)

    def seen(self, text: str) -> bool:
        """Check `text` and, when it is new, remember it."""
        return self.seen_words(word_hashes(text))

    def seen_words(self, words: np.ndarray) -> bool:
        """`seen` for a text's `_shingle.word_hashes`."""
        sig = self.hasher.signature(words)
        if sig is None:
            return False
        keys = self.hasher.band_keys(sig)
        if bool(self.bloom.contains(keys).any()):
            return True
        self.bloom.add(keys)
        return False
