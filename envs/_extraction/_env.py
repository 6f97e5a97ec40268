"""`ExtractionEnv`: one annual report, read through tools, answered in JSON, graded with feedback.

An episode: `reset(task)` loads (building on first use) the report the task's seed names and returns
the task prompt plus its page count. Each step is one tool call (`step_tool`) or one plain-text
command (`step`): reading steps return text with reward = the last submission's score (0 before any);
`submit_answer` grades the answer and returns the verifier's feedback with its score as reward. The
episode is done when a submission gets every field right or after `max_submissions` submissions.
Reading steps are bounded by the loop's budget (`sdk.Budget.max_steps` counts assistant turns).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

from sdk import StepResult, Task, ToolCall

from ._store import load_index
from ._tasks import MAX_SUBMISSIONS, report_for
from ._tools import TEXT_FORMAT_HINT, TOOL_SPECS, Document, parse_text_action
from ._truth import Report
from ._verify import MAX_ANSWER_BYTES, grade_payload

_TOOL_ARGS = {"read_page": {"page"}, "get_table": {"page", "index"}, "search": {"query"}, "submit_answer": {"answer"}}


class ExtractionEnv:
    """`sdk.Environment` with tools for the extraction family (see the package docstring for the format).

    `home`: where built reports are cached (default `$LOOPLIFT_HOME`). `page_chars`: longest page text
    returned by `read_page`. `max_submissions`: answers graded per episode (the last one counts).
    """

    def __init__(self, *, home: Optional[Path] = None, max_submissions: int = MAX_SUBMISSIONS,
                 page_chars: int = 6000) -> None:
        if max_submissions < 1:
            raise ValueError(f"max_submissions must be >= 1, got {max_submissions}")
        self._home = home
        self._max_submissions = max_submissions
        self._page_chars = page_chars
        self._report: Optional[Report] = None
        self._doc: Optional[Document] = None
        self._submissions = 0
        self._score = 0.0
        self._over = False

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI function-tool specs the model is offered."""
        return copy.deepcopy(TOOL_SPECS)

    def reset(self, task: Task) -> str:
        """Load the task's report (building it on first use) and return the prompt."""
        self._report = report_for(task)
        self._doc = Document.from_index(load_index(self._report.seed, self._home, self._report.level))
        self._submissions, self._score, self._over = 0, 0.0, False
        return f"{task.prompt}\n\nThe report has {self._doc.n_pages} pages."

    def step(self, action: str) -> StepResult:
        """A plain-text command (`read_page 3`, `get_table 6 1`, `search sales`, `submit {...}`)."""
        parsed = parse_text_action(action)
        if parsed is None:
            return self._result(TEXT_FORMAT_HINT, {"format_error": True})
        return self._dispatch(*parsed)

    def step_tool(self, call: ToolCall) -> StepResult:
        """One tool call; bad JSON or arguments are told back, not raised."""
        name = call.function.name
        if name not in _TOOL_ARGS:
            return self._result(f"unknown tool {name!r}; the tools are {', '.join(_TOOL_ARGS)}",
                                 {"tool": name, "format_error": True})
        try:
            args = json.loads(call.function.arguments or "{}")
        except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
            return self._result(f"the arguments of {name} are not valid JSON ({e}); e.g. "
                                f"{json.dumps(_example_args(name))}", {"tool": name, "format_error": True})
        if not isinstance(args, dict):
            return self._result(f"the arguments of {name} must be a JSON object, e.g. {json.dumps(_example_args(name))}",
                                {"tool": name, "format_error": True})
        extra = set(args) - _TOOL_ARGS[name]
        if extra:
            return self._result(f"{name} takes {sorted(_TOOL_ARGS[name])}, not {sorted(extra)}",
                                {"tool": name, "format_error": True})
        return self._dispatch(name, args)

    def _dispatch(self, name: str, args: dict[str, Any]) -> StepResult:
        if self._doc is None or self._report is None:
            raise RuntimeError("call ExtractionEnv.reset(task) before step()")
        if self._over:
            return self._result("the episode is over: no submissions left", {"tool": name}, done=True)
        if name == "submit_answer":
            if "answer" not in args:
                return self._result('submit_answer needs {"answer": {...}}', {"tool": name, "format_error": True})
            return self._submit(args["answer"])
        if name == "read_page":
            obs = self._doc.read_page(args.get("page"), self._page_chars)
        elif name == "get_table":
            obs = self._doc.get_table(args.get("page"), args.get("index", 1))
        else:
            obs = self._doc.search(args.get("query"))
        return self._result(obs, {"tool": name})

    def _submit(self, payload: Any) -> StepResult:
        assert self._report is not None
        self._submissions += 1
        g, answer = grade_payload(self._report, payload)
        # What the verifier re-grades: the canonical answer, or the raw payload (cut) when it was rejected.
        stored = json.dumps(answer, sort_keys=True) if answer is not None else _raw(payload)
        self._score = g.score
        self._over = g.success or self._submissions >= self._max_submissions
        info = {"tool": "submit_answer", "submission": stored, "submission_index": self._submissions,
                "score": g.score, "correct": g.correct, "fields": g.total, "errors": dict(g.categories),
                "broken_relations": len(g.broken), "schema_errors": len(g.schema_errors)}
        return self._result(g.feedback(self._submissions, self._max_submissions), info, done=self._over)

    def _result(self, observation: str, info: dict[str, Any], done: bool = False) -> StepResult:
        return StepResult(observation=observation, reward=self._score, done=done, info=info)

    def close(self) -> None:
        """Nothing to release (the report cache stays); forget the episode."""
        self._report, self._doc = None, None


def _raw(payload: Any) -> str:
    """A rejected payload as the verifier re-grades it: its text, cut (JSON that cannot be written is kept as
    its type, which the verifier rejects the same way)."""
    try:
        text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    except (ValueError, RecursionError):
        text = type(payload).__name__
    return text[: MAX_ANSWER_BYTES + 64]


def _example_args(name: str) -> dict[str, Any]:
    examples: dict[str, dict[str, Any]] = {
        "read_page": {"page": 3}, "get_table": {"page": 6, "index": 1}, "search": {"query": "net sales"},
        "submit_answer": {"answer": {"revenue_fy2024": 1234500}}}
    return examples[name]
