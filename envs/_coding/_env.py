"""`CodingEnv`: repair a buggy module in a terminal, through tools or plain text.

The workdir of an episode holds three files: `solution.py` (the buggy module), `test_solution.py` (some
visible tests) and `run_tests.sh` (`python3 -m unittest -v test_solution`). The held-out tests are
not there; the verifier runs them against `solution.py` alone in a clean sandbox.

Actions. With tool calling (OpenAI function tools, `tools` below), one call per step:

    run(command: str)                          run a shell command in the workdir (bash; the working
                                               directory and exported variables persist); observation:
                                               its output (stderr merged, cut to 4,000 chars keeping the
                                               tail) and `[exit code N]`
    read_file(path: str)                       observation: the file's text (cut to 8,000 chars)
    edit_file(path: str, old: str, new: str)   replace the one occurrence of `old` with `new`; an `old`
                                               that occurs 0 or 2+ times is refused (the observation
                                               says how often it occurs)
    edit_file(path: str, content: str)         write the whole file (created if missing)

Paths are relative to the workdir. A malformed call (unknown tool, bad JSON, missing argument) is not
an error: its observation says what was wrong, and the episode goes on.

Plain text (models without tool calling), one action per reply:

    ```bash
    sh run_tests.sh
    ```                                        a fenced bash/sh block: run it, as `run`
    # file: solution.py
    ```python
    <whole file>
    ```                                        a `# file:`-tagged block: write the file, as `edit_file`
    anything else (e.g. "DONE")                end the episode (the answer is what is in solution.py)

A reply with no tool call and no action ends the episode, as an OpenAI agent loop ends when the
assistant answers without calling a tool. No step carries a reward (the verifier decides); each
step's `info` records the workdir's files (path -> sha256) and, when it changed, the text of
`solution.py`, which is what the verifier judges: the final state travels with the trajectory.

`snapshot()`/`restore()` save and resume an episode's sandbox state (see `sandboxes.EnvSnapshot`).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Optional

from sdk import StepResult, Task, ToolCall

from .._envs import SandboxSource, ShellEnv, _clip, _Lease, _safe_path, parse_file_blocks
from sandboxes import EnvSnapshot, Sandbox, SandboxError

__all__ = ["CodingEnv", "TOOLS", "workdir_files"]

SOLUTION = "solution.py"
VISIBLE_TESTS = "test_solution.py"
RUN_TESTS = "run_tests.sh"
RUN_TESTS_SH = "#!/bin/sh\n# Runs the visible tests. The grader runs its own, hidden tests.\nexec python3 -m unittest -v test_solution\n"
#: Most files recorded per step; more is itself a finding (the verifier refuses to judge such a workdir).
MAX_FILES = 200

_FENCE = re.compile(r"^```(bash|sh|shell|console)?[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "run",
        "description": "Run a shell command in the repository (bash; the working directory and exported variables "
                       "persist between calls). Returns its output and exit code.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Return the text of a file in the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "edit_file",
        "description": "Edit a file: replace the single occurrence of `old` with `new`, or, with `content`, "
                       "write the whole file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
            "content": {"type": "string"}}, "required": ["path"]}}},
]

# Runs in the sandbox (`python3 -I -S`: nothing in the workdir is imported): every file's sha256, and
# solution.py's text when its hash differs from the one the environment last saw.
_MANIFEST = r"""
import hashlib, json, os, sys
root, want, prev, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
files, truncated = {}, False
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    names = sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
    for name in names:
        full = os.path.join(dirpath, name)
        rel = os.path.relpath(full, root)
        if len(files) >= limit:
            truncated = True
            break
        try:
            if os.path.islink(full):
                files[rel] = "link:" + os.readlink(full)
                continue
            h = hashlib.sha256()
            with open(full, "rb") as f:
                h.update(f.read(1 << 20))
            files[rel] = h.hexdigest()
        except OSError as e:
            files[rel] = "error:" + str(e.strerror)
solution = None
try:
    with open(os.path.join(root, want), "rb") as f:
        data = f.read(1 << 16)
    if hashlib.sha256(data).hexdigest() != prev:
        solution = data.decode("utf-8", "replace")
except OSError:
    pass
print(json.dumps({"files": files, "truncated": truncated, "solution": solution}))
"""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def workdir_files(task: Task) -> dict[str, str]:
    """The files a coding task starts with (path -> content)."""
    files = task.data.get("files")
    if not isinstance(files, dict) or SOLUTION not in files:
        raise ValueError(f"task {task.id!r} is not a coding task: task.data['files'] must hold {SOLUTION}")
    return {str(k): str(v) for k, v in files.items()}


class CodingEnv:
    """`sdk.Environment` with tools for one repair task; see the module docstring for the actions.

    `source` is where sandboxes come from (a `SandboxPool` for many episodes; see `envs._envs`).
    `use_tools=False` offers no tools (`tools` is empty), for models that have not learned tool calls:
    they act through the plain-text actions only.
    """

    def __init__(self, source: SandboxSource, *, timeout_s: float = 20.0, output_chars: int = 4000,
                 read_chars: int = 8000, use_tools: bool = True) -> None:
        #: The OpenAI function tools the loop sends with each request (empty with use_tools=False).
        self.tools: list[dict[str, Any]] = list(TOOLS) if use_tools else []
        self._lease = _Lease(source, "CodingEnv")
        self._timeout = timeout_s
        self._output_chars = output_chars
        self._read_chars = read_chars
        self._task: Optional[Task] = None
        self._shell: Optional[ShellEnv] = None
        self._solution_sha = ""

    # -- episode --------------------------------------------------------------------------------

    def reset(self, task: Task) -> str:
        """Write the task's files into a clean sandbox; returns the task prompt with solution.py shown."""
        files = workdir_files(task)
        self._start(task)
        sb = self._lease.sandbox
        assert sb is not None
        for path, content in files.items():
            sb.write_file(_safe_path(path), content)
        self._solution_sha = sha256(files[SOLUTION])
        return self._prompt(task, files)

    def _start(self, task: Task) -> None:
        sb = self._lease.acquire()
        self._shell = ShellEnv(sb, timeout_s=self._timeout, output_chars=self._output_chars)
        self._shell.reset(Task(id=task.id, prompt=task.prompt))  # resets the (already clean) sandbox
        self._task = task

    @staticmethod
    def _prompt(task: Task, files: dict[str, str]) -> str:
        sol = files[SOLUTION]
        return (f"{task.prompt}\n\nFiles: {', '.join(sorted(files))}. Run the visible tests with `sh {RUN_TESTS}`.\n"
                f"\n# file: {SOLUTION}\n```python\n{sol}{'' if sol.endswith(chr(10)) else chr(10)}```")

    def step(self, action: str) -> StepResult:
        """A plain-text action: a fenced bash block (run), `# file:` blocks (write), or anything else (end)."""
        return self._lease.annotate(self._step_text(action))

    def step_tool(self, call: ToolCall) -> StepResult:
        """One tool call (`sdk.ToolCall`: `.function.name`, `.function.arguments` as a JSON string)."""
        return self._lease.annotate(self._step_tool(call))

    def _step_text(self, action: str) -> StepResult:
        self._require()
        run = _FENCE.search(action)
        blocks = parse_file_blocks(action)
        if blocks:
            notes = [self._write(path, content) for path, content in blocks]
            return self._after("\n".join(notes), {"action": "write", "paths": [p for p, _ in blocks]})
        if run is not None and run.group(2).strip():
            return self._run(run.group(2))
        return StepResult(observation="Episode ended; solution.py will be graded by the hidden tests.", done=True,
                          info={"action": "end"})

    def _step_tool(self, call: ToolCall) -> StepResult:
        self._require()
        name = getattr(getattr(call, "function", None), "name", "")
        raw = getattr(getattr(call, "function", None), "arguments", "") or "{}"
        try:
            args = json.loads(raw)
            if not isinstance(args, dict):
                raise ValueError("the arguments must be a JSON object")
        except ValueError as e:
            return self._bad(name, f"could not parse the arguments of `{name}` as a JSON object ({e})")
        if name == "run":
            if not isinstance(args.get("command"), str) or not args["command"].strip():
                return self._bad(name, "`run` needs {\"command\": \"<shell command>\"}")
            return self._run(args["command"])
        if name == "read_file":
            if not isinstance(args.get("path"), str):
                return self._bad(name, "`read_file` needs {\"path\": \"<file>\"}")
            return self._read(args["path"])
        if name == "edit_file":
            return self._edit(args)
        return self._bad(name, f"unknown tool `{name}`; the tools are run, read_file and edit_file")

    def close(self) -> None:
        """Give the sandbox back to its source."""
        self._lease.release()
        self._task = self._shell = None

    # -- resumable ------------------------------------------------------------------------------

    def snapshot(self) -> EnvSnapshot:
        """The episode's state between two steps (workdir + shell session + what the env tracks)."""
        shell = self._require()
        inner = shell.snapshot()
        return EnvSnapshot(inner.task if self._task is None else self._task, inner.workdir,
                           {**inner.state, "solution_sha": self._solution_sha})

    def restore(self, snapshot: EnvSnapshot) -> None:
        """Continue from `snapshot` in a sandbox from this environment's source."""
        workdir_files(snapshot.task)
        self._start(snapshot.task)
        assert self._shell is not None
        self._shell.restore(EnvSnapshot(snapshot.task, snapshot.workdir, snapshot.state))
        self._solution_sha = str(snapshot.state.get("solution_sha", ""))

    # -- actions --------------------------------------------------------------------------------

    def _require(self) -> ShellEnv:
        if self._task is None or self._shell is None:
            raise RuntimeError("call CodingEnv.reset(task) before step()")
        return self._shell

    @staticmethod
    def _bad(name: str, message: str) -> StepResult:
        return StepResult(observation=f"Error: {message}", info={"action": name or "?", "format_error": True})

    def _run(self, command: str) -> StepResult:
        res = self._require().run(command)
        return self._after(res.observation, {"action": "run", "exit_code": res.info.get("exit_code"),
                                             "timed_out": res.info.get("timed_out")})

    def _read(self, path: str) -> StepResult:
        try:
            rel = _safe_path(path)
            data = self._sb().read_file(rel).decode("utf-8", errors="replace")
        except (ValueError, SandboxError) as e:
            return self._bad("read_file", str(e))
        return StepResult(observation=_clip(data, self._read_chars) or "(empty file)", info={"action": "read_file"})

    def _edit(self, args: dict[str, Any]) -> StepResult:
        path, content, old, new = args.get("path"), args.get("content"), args.get("old"), args.get("new")
        if not isinstance(path, str):
            return self._bad("edit_file", "`edit_file` needs a \"path\"")
        if isinstance(content, str) and old is None and new is None:
            return self._after(self._write(path, content), {"action": "edit_file", "paths": [path]})
        if not (isinstance(old, str) and isinstance(new, str)) or content is not None:
            return self._bad("edit_file", "`edit_file` takes either \"old\" and \"new\" (replace once) or \"content\" "
                                          "(the whole file), not both")
        try:
            rel = _safe_path(path)
            text = self._sb().read_file(rel).decode("utf-8", errors="replace")
        except (ValueError, SandboxError) as e:
            return self._bad("edit_file", str(e))
        count = text.count(old) if old else 0
        if count != 1:
            why = ("`old` is empty" if not old else f"`old` occurs {count} times in {rel}; it must occur exactly once "
                   + ("(copy it exactly from read_file, whitespace included)" if count == 0 else
                      "(include more surrounding lines so it is unique)"))
            return self._bad("edit_file", why)
        start = text.index(old)
        line = text.count("\n", 0, start) + 1
        note = self._write(rel, text[:start] + new + text[start + len(old):])
        return self._after(f"{note} (replaced 1 occurrence at line {line})", {"action": "edit_file", "paths": [rel]})

    def _write(self, path: str, content: str) -> str:
        try:
            rel = _safe_path(path)
            self._sb().write_file(rel, content)
        except (ValueError, SandboxError) as e:
            return f"Not written: {e}"
        return f"Wrote {rel} ({len(content)} chars)."

    def _sb(self) -> Sandbox:
        sb = self._lease.sandbox
        assert sb is not None
        return sb

    def _after(self, observation: str, info: dict[str, Any]) -> StepResult:
        """Record the workdir's state in the step (the verifier reads the last one)."""
        sb = self._sb()
        r = sb.exec(["python3", "-I", "-S", "-c", _MANIFEST, sb.workdir_path, SOLUTION, self._solution_sha,
                     str(MAX_FILES)], timeout=self._timeout)
        try:
            state = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            info["workdir_error"] = (r.stdout + r.stderr)[-500:] or f"exit code {r.exit_code}"
            return StepResult(observation=observation, info=info)
        info["workdir"] = state["files"]
        info["workdir_truncated"] = bool(state["truncated"])
        if state["solution"] is not None:
            info["solution"] = state["solution"]
            self._solution_sha = sha256(state["solution"])
        return StepResult(observation=observation, info=info)
