"""The extraction family as an `sdk.EnvFamily`: tasks, environment, verifier, budget, reference policies."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from sdk import Budget, EnvFamily

from ._env import ExtractionEnv
from ._policies import POLICIES
from ._tasks import tasks
from ._truth import FULL_LEVEL, check_level
from ._verify import ExtractionVerifier

#: Assistant turns per episode. A model that reads one page per turn needs ~15-25 (10-11 pages, ~9
#: tables, a few searches) plus up to three submissions; the oracle needs 3 (parallel tool calls).
MAX_TURNS = 32
#: Turns per level: level 1 (one page, one table) needs a read, a table and up to three submissions; level 2 has
#: 4-5 pages and 3-4 tables.
LEVEL_TURNS = {1: 8, 2: 16, FULL_LEVEL: MAX_TURNS}
_WHAT = {1: "the income statement alone (one page), 3-6 of its fields",
         2: "highlights, income statement, balance sheet and restatement note (4-5 pages), 8-12 fields",
         FULL_LEVEL: "the whole 10-11 page report, 41-42 fields"}

SYSTEM_PROMPT = (
    "You are a careful financial analyst. Read the report only through the tools, take every figure from "
    "the report (never guess), mind the scale and period of each table, and submit one JSON object.")


def family(home: Optional[Path] = None, level: int = FULL_LEVEL) -> EnvFamily:
    """The `extraction` family at `level` (1, 2 or 3: `_truth.LEVELS`; default the whole report); `home` overrides
    where built reports are cached (default $LOOPLIFT_HOME). Every level has the same tools, verifier, tolerances and
    traps, and the same held-out seeds."""
    check_level(level)
    return EnvFamily(
        name="extraction",
        description="Financial reports: multi-page PDFs with tables, notes, restatements and changing scales; "
                    f"read them through page/table/search tools and answer in a JSON schema (level {level}: "
                    f"{_WHAT[level]}).",
        tasks=functools.partial(tasks, level=level),
        env_factory=lambda: ExtractionEnv(home=home),
        verifier=ExtractionVerifier(),
        policies=POLICIES,
        budget=Budget(max_steps=LEVEL_TURNS[level]),
        system_prompt=SYSTEM_PROMPT,
        tool_choice=None,
    )
