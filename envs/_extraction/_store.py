"""Build each report once: PDF (reportlab), then its text and tables read back by pdfplumber; cached.

Layout under `$LOOPLIFT_HOME/envs/extraction/v<GENERATOR_VERSION>/fin-<seed>/` (the whole report; level 1 and 2 in
`fin-<seed>-l<level>/`):
    report.pdf   the document, byte-identical for a seed
    index.json   per page: the extracted text and tables (what the tools serve)
A report directory appears whole or not at all (`sdk.infra.atomic_dir`), so two processes building
the same seed, or a crash mid-build, never leave a half-written report. The cache is never in git and
needs no network; deleting it only costs the rebuild (~0.4 s per report: ~0.05 s to write, the rest
pdfplumber reading the tables back).

Why the tools read the extracted index and not the PDF: pdfplumber takes ~0.07 s per page, an episode
reads a page many times, and parsing happens once per report here, on the host, of a PDF this package
wrote itself. What the model sends (page numbers, a search phrase) never reaches a parser.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from sdk import looplift_home
from sdk.infra import atomic_dir

from ._tasks import report
from ._truth import FULL_LEVEL, GENERATOR_VERSION

INDEX_VERSION = 1


def cache_root(home: Optional[Path] = None) -> Path:
    """Where built reports live: `$LOOPLIFT_HOME/envs/extraction/v<N>` (or under `home`)."""
    return (home or looplift_home()) / "envs" / "extraction" / f"v{GENERATOR_VERSION}"


def extract(pdf: bytes) -> dict[str, Any]:
    """Text and tables of every page of `pdf`, as pdfplumber reads them."""
    import pdfplumber  # heavy (pdfminer); imported when a report is built

    pages = []
    with pdfplumber.open(io.BytesIO(pdf)) as doc:
        for page in doc.pages:
            tables = [[["" if c is None else str(c) for c in row] for row in t] for t in page.extract_tables()]
            pages.append({"text": page.extract_text() or "", "tables": tables})
    return {"version": INDEX_VERSION, "pages": pages}


def build(seed: int, home: Optional[Path] = None, level: int = FULL_LEVEL) -> Path:
    """The directory of report `seed` at `level`, built first if it is not cached yet."""
    # The host's cache: named by seed (the agent never sees this path).
    out = cache_root(home) / (f"fin-{seed}" if level == FULL_LEVEL else f"fin-{seed}-l{level}")
    if (out / "index.json").is_file():
        return out
    from ._pdf import render  # reportlab: imported when a report is built, not when the family loads

    pdf = render(report(seed, level))
    index = extract(pdf) | {"seed": seed} | ({} if level == FULL_LEVEL else {"level": level})
    with atomic_dir(out, replace=False) as tmp:
        (tmp / "report.pdf").write_bytes(pdf)
        (tmp / "index.json").write_text(json.dumps(index, ensure_ascii=False))
    return out


def load_index(seed: int, home: Optional[Path] = None, level: int = FULL_LEVEL) -> dict[str, Any]:
    """The extracted pages of report `seed` at `level` (built on first use)."""
    where = build(seed, home, level)
    data: dict[str, Any] = json.loads((where / "index.json").read_text())
    if data.get("version") != INDEX_VERSION or data.get("seed") != seed or data.get("level", FULL_LEVEL) != level:
        raise RuntimeError(f"{where} holds another index (version {data.get('version')}); delete it to rebuild")
    return data


def build_all(seeds: Iterable[int], home: Optional[Path] = None,
              progress: Optional[Callable[[int], None]] = None, level: int = FULL_LEVEL) -> list[Path]:
    """Build (or find cached) every report of `seeds` at `level`; `progress(seed)` after each."""
    out = []
    for s in seeds:
        out.append(build(s, home, level))
        if progress is not None:
            progress(s)
    return out
