"""The extraction family as an `sdk.EnvFamily`: tasks, environment, verifier, budget, reference policies."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sdk import Budget, EnvFamily

from ._env import ExtractionEnv
from ._policies import POLICIES
from ._tasks import tasks
from ._verify import ExtractionVerifier

#: Assistant turns per episode. A model that reads one page per turn needs ~15-25 (10-11 pages, ~9
#: tables, a few searches) plus up to three submissions; the oracle needs 3 (parallel tool calls).
MAX_TURNS = 32

SYSTEM_PROMPT = (
    "You are a careful financial analyst. Read the report only through the tools, take every figure from "
    "the report (never guess), mind the scale and period of each table, and submit one JSON object.")


def family(home: Optional[Path] = None) -> EnvFamily:
    """The `extraction` family; `home` overrides where built reports are cached (default $LOOPLIFT_HOME)."""
    return EnvFamily(
        name="extraction",
        description="Financial reports: multi-page PDFs with tables, notes, restatements and changing scales; "
                    "read them through page/table/search tools and answer 41-42 fields in a JSON schema.",
        tasks=tasks,
        env_factory=lambda: ExtractionEnv(home=home),
        verifier=ExtractionVerifier(),
        policies=POLICIES,
        budget=Budget(max_steps=MAX_TURNS),
        system_prompt=SYSTEM_PROMPT,
        tool_choice=None,
    )
