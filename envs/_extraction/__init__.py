"""The `extraction` task family: read a long financial report (PDF) through tools, answer in a JSON schema.

THE TASK
    A generated annual report (10-11 A4 pages: cover, letter to shareholders, highlights and a
    five-year summary, management's discussion, income statement, balance sheet, cash flow statement,
    notes on restatement, segments, taxes, quarters, employees and dividends, glossary) of a fictional
    company, drawn from a seed (`_truth.generate`, printed by `_pdf.render` with reportlab, read back
    with pdfplumber by `_store.build`). The agent extracts 41-42 fields (3 or 4 segments) into one
    JSON object. 12 relations tie the fields (6 of them across sections: segment and quarterly
    revenues vs the income statement, free cash flow vs the cash flow statement, growth, gross margin
    and tax rate vs the figures). Traps on purpose: scales change between tables (thousands,
    millions, headcount in thousands, dividends in cents), the prior year is restated in the
    statements but "as reported" in the highlights and letter, costs may be printed in parentheses.

THE ACTIONS (exact format)
    Tools (OpenAI function tools; `ExtractionEnv.tools`), each call one step:
        read_page(page: int)                 -> "[page 3 of 11]\n<text>\n[2 tables on this page: get_table(page=3, index=1..2)]"
        get_table(page: int, index: int = 1) -> "[table 1 of 2 on page 3: 7 rows x 4 columns]\n<cells joined by ' | ', one row per line>"
        search(query: str)                   -> "<n> line(s) contain 'net sales':\np6: Net sales 1,234,500 1,140,200\n..."
        submit_answer(answer: object)        -> the verifier's feedback (below); `answer` may also be a JSON string
    The same actions as plain text, one per assistant message (for models without tool calling):
        `read_page 3` | `read_page(3)` | `get_table 6 2` | `search net sales` | `submit {...}` |
        a bare JSON object (or a ```json block), which is a submission.
    Anything else gets a one-line hint back (`TEXT_FORMAT_HINT`), never an error.

THE ANSWER
    `task.data["schema"]`: a JSON Schema object, every field `number | null`, no other keys
    (`additionalProperties: false`); the prompt lists each field with its unit and sign rule. Money is
    in thousands of the report's currency, percentages in percent, per-share amounts in currency,
    headcount in persons; prior-year fields are the restated figures. At most 16,000 bytes.

FEEDBACK AND REWARD (`_verify`)
    Each submission is graded field by field (tolerance: 0.05% for money, 0.06 points for percent,
    0.006 per share, exact headcount). The reply names the missing fields, the misaligned numbers
    (wrong sign, off by 1,000 or 1,000,000, cents vs currency, fraction vs percent, the other fiscal
    year, the figure as previously reported, a neighbouring line, two swapped fields), the numbers
    that match nothing, and the relations the submitted numbers break — never an expected value.
    Reward = fraction of fields correct (partial credit); success = all of them. Up to 3 submissions
    (`MAX_SUBMISSIONS`); the episode ends on a perfect one or after the third, and the last counts.
    A submission that breaks the schema scores 0 and is told only what broke.

WHERE THE TOOLS RUN, AND WHY ON THE HOST
    The tools read an index (text and tables per page) extracted once per report, on the host, from a
    PDF this package wrote. The model sends only a page number, a table index, a search phrase and a
    JSON answer: no code runs, nothing it sends reaches a parser other than `json.loads`, and search is
    a literal substring match. A sandbox would cost a container per episode and contain nothing. The
    document text is still untrusted content: it is returned only as observations, and the verifier
    never reads it (it compares numbers with the ground truth), so instructions hidden in a document
    or an answer cannot change a score. Reading PDFs from outside (real filings) would change this:
    pdfminer parsing hostile files belongs in a sandbox, and is not done here.

LEVELS (`family(level=N)`, `tasks(..., level=N)`; `_truth.LEVELS`)
    The same report of the same seed (figures, layout, tools, verifier, traps), printed and asked in
    part: 1 = the income statement alone (one page) with 3-6 of its fiscal-year amounts (the trap: its
    scale); 2 = highlights, income statement, balance sheet and Note 2 (4 pages) with 8-12 fields, a
    restated prior-year one among them where the report restates; 3 = the whole report (the default).
    Budgets 8, 16 and 32 turns. Task ids `extraction:l<level>:<seed>` (the whole report: `extraction:<seed>`).

SPLITS AND CACHE
    Held-out: the fixed seeds 10,000,000-10,000,199 (200 reports); training seeds are drawn below
    10,000,000. Reports are built on first use (~0.4 s each, mostly pdfplumber) and cached under
    `$LOOPLIFT_HOME/envs/extraction/v1/`; `bench/extraction.py` builds the held-out split and measures it.

POLICIES (`_policies`)
    oracle (reads every page and table through the tools, computes the answer, 3 turns); careless (the
    oracle with one careless reader's mistake in one field on half the tasks: `MISTAKES`, a scale missed,
    the other year, two fields swapped; `careless(rate)` for another share: the extraction base model's
    demonstrations), noop, and
    the cheats cheat-zeros, cheat-first-number, cheat-schema-example, cheat-every-number, cheat-inject,
    cheat-huge-number (10**309, 1e999, NaN: rejected as bad fields, never a verifier crash) and
    cheat-rebuild-from-id (regenerates the truth from the report id the prompt shows; 0 because the id
    is keyed with this install's secret, `_tasks.report_id`, and never spells the seed).

Not done: scanned/OCR documents, multi-column layouts, charts, several currencies in one report,
net losses; a prober that uses the feedback's "figure for fiscal N-1" hints is bounded only by the
3-submission cap.
"""

from __future__ import annotations

from ._env import ExtractionEnv
from ._family import family
from ._policies import MISTAKES, POLICIES, careless
from ._store import build, build_all, cache_root
from ._tasks import HELD_OUT_SIZE, MAX_SUBMISSIONS, held_out_seeds, report, tasks
from ._tools import TEXT_FORMAT_HINT, TOOL_SPECS
from ._truth import FULL_LEVEL, LEVELS
from ._verify import ExtractionVerifier, grade, parse_answer

__all__ = [
    "ExtractionEnv",
    "ExtractionVerifier",
    "FULL_LEVEL",
    "HELD_OUT_SIZE",
    "LEVELS",
    "MISTAKES",
    "MAX_SUBMISSIONS",
    "POLICIES",
    "TEXT_FORMAT_HINT",
    "TOOL_SPECS",
    "build",
    "build_all",
    "cache_root",
    "careless",
    "family",
    "grade",
    "held_out_seeds",
    "parse_answer",
    "report",
    "tasks",
]
