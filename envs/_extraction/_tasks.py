"""Tasks: which seeds make the held-out split and the training split, and what the agent is told.

Held-out reports are seeds `HELD_OUT_BASE .. HELD_OUT_BASE + HELD_OUT_SIZE - 1`, fixed forever; training
seeds are drawn below `HELD_OUT_BASE`, so no training report is ever a held-out one. A task carries
its seed and the published answer schema (`data["schema"]`, a JSON Schema; `data["example"]` shows
the shape with placeholder values that never equal a real figure); never the ground truth, which
the environment and the verifier regenerate from the seed.

The report id the prompt names is keyed, not the seed: `fin-` and 12 letters of an HMAC of the seed
under this install's key (`$LOOPLIFT_EXTRACTION_KEY`, else `$LOOPLIFT_HOME/extraction.key`, made on
first use). The generator is public and deterministic, so an id that spelled the seed would let a
program (not a model) rebuild the ground truth from the prompt alone (`cheat-rebuild-from-id` tries).
The id is stable within an install (the environment and the verifier agree, runs repeat) and has no
digits at all, so it cannot spell any seed. The seed stays in `task.id` and `task.data`, which are the
host's bookkeeping (the verifier needs it); the model is shown neither.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import random
from typing import Any, Literal, Optional

from sdk import Task
from sdk.infra import ensure_secret

from ._truth import EXAMPLE, FULL_LEVEL, GENERATOR_VERSION, LEVELS, Report, check_level, generate

HELD_OUT_BASE = 10_000_000
HELD_OUT_SIZE = 200
#: Submissions an episode allows: feedback after each, the last one is final.
MAX_SUBMISSIONS = 3
#: The key that makes report ids (see the module docstring): this variable, else this file under $LOOPLIFT_HOME.
REPORT_KEY_ENV = "LOOPLIFT_EXTRACTION_KEY"
REPORT_KEY_FILE = "extraction.key"

@functools.lru_cache(maxsize=512)
def report(seed: int, level: int = FULL_LEVEL) -> Report:
    """The ground truth of report `seed` at `level` (cached: the env and the verifier both need it)."""
    return generate(seed, report_id(seed), level)


def report_id(seed: int) -> str:
    """The id the prompt shows for report `seed`: keyed with this install's secret, never derived from the seed
    alone, and letters only (a-p), so it cannot contain the seed's digits."""
    key = ensure_secret(REPORT_KEY_ENV, REPORT_KEY_FILE).encode()
    digest = hmac.new(key, f"extraction-report-{seed}".encode(), hashlib.sha256).hexdigest()
    return "fin-" + "".join(chr(ord("a") + int(c, 16)) for c in digest[:12])


def report_for(task: Task) -> Report:
    """The ground truth behind an extraction task."""
    seed = task.data.get("seed")
    if not isinstance(seed, int):
        raise ValueError(f"task {task.id!r} is not an extraction task: task.data['seed'] (an int) is missing")
    level = task.data.get("level", FULL_LEVEL)  # tasks from before the levels are the whole report
    if level not in LEVELS:
        raise ValueError(f"task {task.id!r}: task.data['level'] must be one of {LEVELS}, not {level!r}")
    return report(seed, level)


def schema(r: Report) -> dict[str, Any]:
    """The JSON Schema of the answer to report `r`."""
    return {"type": "object", "additionalProperties": False, "required": [s.key for s in r.specs],
            "properties": {s.key: {"type": ["number", "null"], "description": s.description} for s in r.specs}}


def prompt(r: Report) -> str:
    """What the agent reads first: the job, the tools, the answer rules and the fields."""
    fields = "\n".join(f"- {s.key}: {s.description}" for s in r.specs)
    example = json.dumps({s.key: EXAMPLE[s.kind] for s in r.specs[:3]})[:-1] + ", ...}"
    return f"""\
Extract figures from {_DOCUMENT[r.level]} of {r.company} for fiscal {r.fy} (report {r.report_id}).

Read the report with the tools: read_page(page) returns a page's text and says how many tables it has,
get_table(page, index) returns one table's cells, search(query) lists the lines that contain a phrase.
When you have the figures, call submit_answer(answer) with one JSON object holding every field below.
(Without tool calling, write one command per message instead: `read_page 3`, `get_table 6 1`,
`search net sales`, or `submit {{...}}` with the JSON object.)

Rules for the answer:
- Plain JSON numbers only: 1234500, not "1,234,500", "$1.2m" or a list. null when you cannot find a figure.
- Money in thousands of {r.currency}: convert from the scale each table or sentence states (thousands, millions).
- Percentages in percent (12.5 means 12.5%); per-share amounts in {r.currency}; follow each field's sign rule.
- Where the report restates the prior year, the prior-year fields take the restated figures.
- Exactly the keys below, no others. Example of the shape (placeholder values): {example}
- The verifier answers each submission with the fields that are missing or wrong and the sums that do not add
  up; you may correct and submit again, {MAX_SUBMISSIONS} submissions in all. The last one counts.

Fields ({len(r.specs)}):
{fields}"""


#: What the prompt calls the document of each level.
_DOCUMENT = {1: "the income statement", 2: "the financial statements", 3: "the annual report"}


def make_task(seed: int, split: Literal["train", "held_out"], level: int = FULL_LEVEL) -> Task:
    r = report(seed, level)
    example = {s.key: EXAMPLE[s.kind] for s in r.specs}
    task_id = f"extraction:{seed}" if level == FULL_LEVEL else f"extraction:l{level}:{seed}"
    return Task(id=task_id, prompt=prompt(r),
                data={"seed": seed, "level": level, "split": split, "report_id": r.report_id,
                      "generator": GENERATOR_VERSION, "slice": "restated" if r.restated else "not-restated",
                      "schema": schema(r), "example": example})


def held_out_seeds(n: Optional[int] = None) -> list[int]:
    """The fixed held-out seeds (the first `n` of them)."""
    size = HELD_OUT_SIZE if n is None else n
    if not 0 <= size <= HELD_OUT_SIZE:
        raise ValueError(f"the held-out split has {HELD_OUT_SIZE} reports; asked for {size}")
    return [HELD_OUT_BASE + i for i in range(size)]


def train_seeds(n: Optional[int], seed: int) -> list[int]:
    """`n` distinct training seeds (default `HELD_OUT_SIZE`) drawn from `seed`; never a held-out seed."""
    size = HELD_OUT_SIZE if n is None else n
    rng = random.Random(f"extraction-train-{seed}")
    out: dict[int, None] = {}
    while len(out) < size:
        out.setdefault(rng.randrange(HELD_OUT_BASE), None)
    return list(out)


def tasks(split: Literal["train", "held_out"], n: Optional[int] = None, seed: int = 0,
          level: int = FULL_LEVEL) -> list[Task]:
    """`n` tasks of `split` at `level` (`LEVELS`; the held-out split ignores `seed`: it is fixed, the same
    `HELD_OUT_SIZE` reports at every level, never a training report at any)."""
    if split not in ("train", "held_out"):
        raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
    check_level(level)
    seeds = held_out_seeds(n) if split == "held_out" else train_seeds(n, seed)
    return [make_task(s, split, level) for s in seeds]
