"""Two general task environments on top of `Sandbox`: a repository to fix (`CodeEnv`) and a terminal (`ShellEnv`).

`CodeEnv` writes a small repository (the task's `files`) into a sandbox, lets the model rewrite files
with fenced blocks, runs the task's tests after each action, and rewards the fraction that pass.
`ShellEnv` runs one shell command per step and carries the session's working directory and exported
variables from step to step (each `Sandbox.exec` is a new process, so that state is saved and restored
explicitly; what persists and what does not is listed in `ShellEnv`'s docstring).

Both take a sandbox *source*: a `Sandbox` (the caller owns it; it is reset on every `reset`), a
`SandboxPool` (one sandbox is borrowed from `reset` until `close`), or a factory such as
`lambda: LocalSandbox(config)` (a fresh sandbox per episode, closed by `close`). Call `close()` when
the episode ends; the SDK loop does.

Not done here: anti-gaming of the tests. A model that writes a `unittest.py` or `conftest.py` can
shadow the test runner; `protected` paths only stop it from overwriting the named files. Judge final
success with a verifier that runs held-out tests in a clean sandbox.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from sdk import StepResult, Task

from sandboxes import EnvSnapshot, ExecResult, Sandbox, SandboxError, SandboxPool

__all__ = ["CodeEnv", "SandboxSource", "ShellEnv", "TestReport", "parse_file_blocks", "parse_test_output",
           "with_pool_stats"]

#: Where an environment gets its sandbox: a sandbox (caller-owned), a pool, or a factory.
SandboxSource = Union[Sandbox, SandboxPool, Callable[[], Sandbox]]

DEFAULT_TEST_COMMAND: tuple[str, ...] = ("python3", "-m", "unittest", "-v")


# -- sandbox sources ------------------------------------------------------------------------------


class _Lease:
    """Holds the one sandbox an episode uses, however it was obtained, and gives it back on `release`."""

    def __init__(self, source: SandboxSource, owner: str) -> None:
        if not (isinstance(source, (Sandbox, SandboxPool)) or callable(source)):
            raise TypeError(
                f"{owner} needs a Sandbox, a SandboxPool or a factory returning a Sandbox, got {type(source).__name__}"
            )
        self._source = source
        self._stack = contextlib.ExitStack()
        self.sandbox: Optional[Sandbox] = None

    def acquire(self) -> Sandbox:
        """A clean sandbox for a new episode (the previous one, if any, is given back first)."""
        self.release()
        src = self._source
        if isinstance(src, Sandbox):
            src.reset()  # the caller's sandbox: empty it, but never close it
            sb = src
        elif isinstance(src, SandboxPool):
            sb = self._stack.enter_context(src.acquire())  # pool sandboxes come back clean
        else:
            sb = src()
            self._stack.callback(sb.close)
        self.sandbox = sb
        return sb

    def annotate(self, result: StepResult) -> StepResult:
        """`result` with the pool's stats in `info["sandbox_pool"]` when the sandbox came from a pool (the
        dashboard shows pool size and load per app from them); unchanged for a sandbox or a factory."""
        return with_pool_stats(result, self._source if isinstance(self._source, SandboxPool) else None)

    def release(self) -> None:
        self.sandbox = None
        self._stack.close()
        self._stack = contextlib.ExitStack()


def with_pool_stats(result: StepResult, pool: Optional[SandboxPool]) -> StepResult:
    """`result` with `pool`'s stats snapshot in `info["sandbox_pool"]` (a few ints; nothing when no pool, and
    a snapshot the step already took, e.g. while it held its sandbox, is kept)."""
    if pool is not None and "sandbox_pool" not in result.info:
        result.info["sandbox_pool"] = pool.stats().snapshot()
    return result


# -- helpers --------------------------------------------------------------------------------------


def _safe_path(path: object) -> str:
    """`path` normalised, or ValueError when it is not a relative path inside the workdir."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"file path must be a non-empty string, got {path!r}")
    if "\0" in path or "\\" in path:
        raise ValueError(f"file path {path!r} contains a NUL byte or a backslash; use '/'-separated relative paths")
    if path.startswith("/") or path.startswith("~"):
        raise ValueError(f"file path {path!r} is absolute; give it relative to the repository root, e.g. 'pkg/mod.py'")
    if ".." in path.split("/"):
        raise ValueError(f"file path {path!r} contains '..'; paths must stay inside the repository")
    norm = posixpath.normpath(path)
    if norm in (".", "") or path.endswith("/"):
        raise ValueError(f"file path {path!r} names a directory, not a file")
    return norm


def _clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` chars, keeping the head and (mostly) the tail, where errors are."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} chars cut ...]\n{text[-tail:]}"


def _command(value: object, what: str) -> list[str]:
    """A command from task data: a list of argv strings, or one string run by `sh -c`."""
    if isinstance(value, str):
        return ["sh", "-c", value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{what} must be a non-empty list of strings or a shell string, got {value!r}")


# -- test output ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestReport:
    """Counts and failing test names read from a test runner's output."""

    __test__ = False  # not a pytest test class

    passed: int
    failed: int
    failing: tuple[str, ...]
    #: "unittest", "pytest", or "" when nothing was recognised.
    runner: str

    @property
    def total(self) -> int:
        return self.passed + self.failed


_UT_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UT_RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$", re.MULTILINE)
_UT_SECTION_HEAD = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (.+)$", re.MULTILINE)
_PY_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|xfailed|xpassed|skipped|deselected|warnings?)")
_PY_FAILING = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def parse_test_output(output: str) -> TestReport:
    """Read pass/fail counts from unittest (`-v` or not) or pytest output; `runner=""` when neither.

    unittest: counts come from the `Ran N tests` line and the `OK`/`FAILED (failures=…, errors=…)`
    line; skipped tests count neither way, expected failures pass, unexpected successes fail.
    pytest: from the last `N passed, M failed, K errors` summary (xfailed passes, xpassed fails).
    """
    ran = list(_UT_RAN.finditer(output))
    if ran:
        n = int(ran[-1].group(1))
        res = _UT_RESULT.search(output, ran[-1].end())
        counts: dict[str, int] = {}
        if res and res.group(2):
            for part in res.group(2).split(","):
                key, _, val = part.strip().partition("=")
                if val.isdigit():
                    counts[key] = int(val)
        failed = counts.get("failures", 0) + counts.get("errors", 0) + counts.get("unexpected successes", 0)
        passed = max(n - counts.get("skipped", 0) - failed, 0)
        names = tuple(dict.fromkeys(m.group(2) for m in _UT_SECTION_HEAD.finditer(output)))
        return TestReport(passed=passed, failed=failed, failing=names, runner="unittest")
    for line in reversed(output.splitlines()):
        found = dict((kind, int(num)) for num, kind in _PY_SUMMARY.findall(line))
        if " in " in line and found.keys() & {"passed", "failed", "error", "errors"}:
            passed = found.get("passed", 0) + found.get("xfailed", 0)
            failed = found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0) + found.get("xpassed", 0)
            names = tuple(dict.fromkeys(_PY_FAILING.findall(output)))
            return TestReport(passed=passed, failed=failed, failing=names, runner="pytest")
    return TestReport(passed=0, failed=0, failing=(), runner="")


def _unittest_failures(output: str, limit: int) -> str:
    """The FAIL/ERROR sections of unittest output, each trimmed to its header and traceback tail."""
    sections = re.split(r"^={20,}\n", output, flags=re.MULTILINE)[1:]
    parts: list[str] = []
    per = max(limit // max(len(sections), 1), 300)
    for sec in sections:
        sec = re.split(r"^-{20,}\nRan \d+ test", sec, flags=re.MULTILINE)[0]
        head, _, body = sec.partition("\n")
        body = re.sub(r"^-{20,}\n", "", body.strip("\n"), flags=re.MULTILINE)
        # The end of a traceback (the failing assert and the error) is what the model needs.
        parts.append(head + "\n" + (body if len(body) <= per else "[...]\n" + body[-per:]))
    return "\n\n".join(parts)


# -- CodeEnv --------------------------------------------------------------------------------------

_FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_FILE_TAG = re.compile(r"^\s*(?:#|//|--)?\s*\**\s*file:\s*`?([^`*\s][^`*]*?)`?\s*\**\s*$", re.IGNORECASE)
_DONE = re.compile(r"^\s*DONE\.?\s*$", re.MULTILINE)

CODE_FORMAT_HINT = (
    "No file to write was found. Give each file's full new content in a fenced code block, preceded by a line "
    "`# file: path/to/file.py` (or with `# file: path/to/file.py` as the block's first line). "
    "Reply `DONE` on its own line to stop."
)


def parse_file_blocks(action: str) -> list[tuple[str, str]]:
    """`(path, content)` for each fenced block tagged `# file: path` (the line before, or its first line).

    Untagged blocks are ignored (they are explanation). Paths are returned as written, unvalidated.
    """
    out: list[tuple[str, str]] = []
    prev_end = 0
    for m in _FENCE.finditer(action):
        before = [ln for ln in action[prev_end : m.start()].splitlines() if ln.strip()]
        body = m.group(1)
        prev_end = m.end()
        tag = _FILE_TAG.match(before[-1]) if before else None
        if tag is None:
            first, _, rest = body.partition("\n")
            tag = _FILE_TAG.match(first)
            if tag is None:
                continue
            body = rest  # the tag line is not part of the file (it would break JSON, YAML, ...)
        out.append((tag.group(1).strip(), body))
    return out


class CodeEnv:
    """`sdk.Environment`: fix a small repository until its tests pass; reward = fraction passing.

    Task data: `files` (dict path -> content, required), `test_command` (argv list or shell string;
    default the constructor's), `protected` (paths the model may not overwrite, e.g. the tests).

    `reset` writes the files into a clean sandbox and returns the prompt followed by the files (each
    in a `# file:`-tagged block, the format the model answers in; files over `show_chars` are listed
    without content). `step` writes every tagged block, runs the tests and returns the failing
    tests' tracebacks (trimmed to `feedback_chars`) and "k/n tests passed". The reward of each step
    is the current pass fraction (not a delta), so the loop's "last reward" is the episode's score.
    `done` when every test passes or the action has a line `DONE` (the tests still run, to score it).
    A timeout, or a failure with no test results, is reward 0 with the output's tail as feedback.
    """

    def __init__(
        self,
        source: SandboxSource,
        *,
        test_command: Sequence[str] = DEFAULT_TEST_COMMAND,
        timeout_s: float = 30.0,
        feedback_chars: int = 2000,
        show_chars: int = 8000,
    ) -> None:
        self._lease = _Lease(source, "CodeEnv")
        self._default_cmd = _command(list(test_command), "test_command")
        self._timeout = timeout_s
        self._feedback_chars = feedback_chars
        self._show_chars = show_chars
        self._task: Optional[Task] = None
        self._cmd: list[str] = self._default_cmd
        self._protected: frozenset[str] = frozenset()

    def reset(self, task: Task) -> str:
        """Write `task.data["files"]` into a clean sandbox; ValueError for a path outside the workdir."""
        files = task.data.get("files")
        if not isinstance(files, dict) or not files:
            raise ValueError(f"task {task.id!r}: CodeEnv needs task.data['files'] = {{path: content}}, non-empty")
        checked: dict[str, str] = {}
        for path, content in files.items():
            if not isinstance(content, str):
                raise ValueError(f"task {task.id!r}: content of {path!r} must be str, got {type(content).__name__}")
            try:
                checked[_safe_path(path)] = content
            except ValueError as e:
                raise ValueError(f"task {task.id!r}: {e}") from None
        cmd = task.data.get("test_command")
        self._cmd = self._default_cmd if cmd is None else _command(cmd, f"task {task.id!r}: test_command")
        self._protected = frozenset(_safe_path(p) for p in task.data.get("protected", ()))
        sb = self._lease.acquire()
        for path, content in checked.items():
            sb.write_file(path, content)
        self._task = task
        return self._prompt(task, checked)

    def _prompt(self, task: Task, files: dict[str, str]) -> str:
        shown: list[str] = []
        for path in sorted(files):
            content = files[path]
            if len(content) > self._show_chars:
                shown.append(f"# file: {path}  ({len(content)} chars, not shown)")
            else:
                nl = "" if content.endswith("\n") or not content else "\n"
                shown.append(f"# file: {path}\n```\n{content}{nl}```")
        lines = [task.prompt, "", f"Repository ({len(files)} files):", *(f"  {p}" for p in sorted(files)), ""]
        lines += shown
        lines += ["", f"Tests run with: {shlex.join(self._cmd)}", CODE_FORMAT_HINT.split(". ", 1)[1]]
        return "\n".join(lines)

    def step(self, action: str) -> StepResult:
        """Write the action's tagged files, run the tests, and report (with the pool's stats in `info`)."""
        return self._lease.annotate(self._step(action))

    def _step(self, action: str) -> StepResult:
        sb = self._lease.sandbox
        if self._task is None or sb is None:
            raise RuntimeError("call CodeEnv.reset(task) before step()")
        blocks = parse_file_blocks(action)
        said_done = _DONE.search(_FENCE.sub("", action)) is not None
        if not blocks and not said_done:
            return StepResult(observation=CODE_FORMAT_HINT, info={"format_error": True})
        problems: list[str] = []
        written: list[str] = []
        for raw_path, content in blocks:
            try:
                path = _safe_path(raw_path)
            except ValueError as e:
                problems.append(f"Not written: {e}")
                continue
            if path in self._protected:
                problems.append(f"Not written: {path} is protected (part of the task's tests)")
                continue
            sb.write_file(path, content)
            written.append(path)
        result = sb.exec(self._cmd, timeout=self._timeout)
        return self._score(result, problems, written, said_done)

    def _score(self, r: ExecResult, problems: list[str], written: list[str], said_done: bool) -> StepResult:
        output = r.stdout + ("\n" if r.stdout and not r.stdout.endswith("\n") else "") + r.stderr
        report = parse_test_output(output)
        info: dict[str, Any] = {"exit_code": r.exit_code, "timed_out": r.timed_out, "written": written,
                                "passed": report.passed, "failed": report.failed, "failing": list(report.failing),
                                "duration_s": r.duration_s}
        lead = "\n".join(problems) + ("\n\n" if problems else "")
        if r.timed_out or r.oom_killed or report.total == 0:
            why = (f"Tests timed out after {self._timeout:g}s." if r.timed_out else
                   "Tests were killed for exceeding the memory limit." if r.oom_killed else
                   f"No test results found (exit code {r.exit_code}).")
            tail = output.strip()[-self._feedback_chars :]
            obs = f"{lead}{why}\n{tail}".rstrip() + "\n0 tests passed"
            return StepResult(observation=obs, reward=0.0, done=said_done, info=info)
        all_pass = report.failed == 0
        if all_pass:
            detail = ""
        elif report.runner == "unittest":
            detail = _unittest_failures(output, self._feedback_chars)
        else:
            detail = output.strip()
        detail = _clip(detail, self._feedback_chars)
        summary = f"{report.passed}/{report.total} tests passed"
        if report.failing:
            summary += " (failing: " + ", ".join(report.failing[:10]) + ")"
        obs = f"{lead}{detail}\n\n{summary}" if detail else f"{lead}{summary}"
        return StepResult(observation=obs.strip(), reward=report.passed / report.total,
                          done=all_pass or said_done, info=info)

    def close(self) -> None:
        """Give the sandbox back (pool), close it (factory), or leave it open (a caller's sandbox)."""
        self._lease.release()
        self._task = None


# -- ShellEnv -------------------------------------------------------------------------------------

_STATE_FILE = ".looplift_shell_state"
_CWD_MARK = "__LOOPLIFT_CWD__="
# Runs as `bash -c WRAPPER looplift CWD COMMAND` (POSIX sh too). It restores the exported variables
# saved by the previous command, enters the previous directory, runs the command with stderr merged
# into stdout (as a terminal shows them), and saves the state from an EXIT trap, so that `exit 3` or
# a failing `set -e` line still saves it. Names start with __ll_ to stay out of the user's way.
_WRAPPER = f"""\
__ll_home=$PWD
__ll_state="$__ll_home/{_STATE_FILE}"
__ll_cwd=$1
__ll_cmd=$2
set --
if [ -f "$__ll_state" ]; then . "$__ll_state" 2>/dev/null; fi
__ll_old=${{OLDPWD-}}
if [ -n "$__ll_cwd" ] && ! cd -- "$__ll_cwd" 2>/dev/null; then
  echo "looplift: directory $__ll_cwd is gone; starting in $__ll_home"
  cd -- "$__ll_home"
fi
OLDPWD=$__ll_old
__ll_save() {{
  __ll_rc=$?
  {{ export -p; printf '# {_CWD_MARK}%s\\n' "$PWD"; }} > "$__ll_state" 2>/dev/null
  printf '\\n{_CWD_MARK}%s\\n' "$PWD"
  exit $__ll_rc
}}
trap __ll_save EXIT
exec 2>&1
eval "$__ll_cmd"
"""

SHELL_FORMAT_HINT = "Reply with one shell command (or a ```bash block of commands) to run in the terminal."


class ShellEnv:
    """`sdk.Environment`: a terminal session, one shell command (or script) per step.

    The action is the command: the content of its fenced blocks when it has any (joined), else the
    whole action. It runs under `bash -c` (`sh -c` when the image has no bash) with stderr merged
    into stdout; the observation is that output (cut to `output_chars`, keeping the tail) plus
    `[exit code N]`. When the task's data has `check_command` (argv list or shell string), it runs
    after each step in the workdir, outside the session; exit 0 is reward 1 and ends the episode.

    What persists between steps:
      * the working directory (tracked here; if it was deleted, the next command starts in the workdir);
      * exported variables (`export X=1`; saved with `export -p` to `.looplift_shell_state` in the
        workdir, a file the session can see and delete), `OLDPWD` included, so `cd -` works;
      * files in the workdir (and, on Docker, in /tmp) until the episode ends.
    What does not:
      * unexported shell variables, shell functions, aliases, `set`/`shopt` options, traps, umask;
      * unsetting a variable the sandbox starts with (HOME, PATH, ...): the next command has it again;
      * background processes: each command's process group ends with it, and one left holding the
        output open makes the step wait until the timeout;
      * anything of a command that timed out (it is killed before it can save; the state stays as
        it was before that command).
    """

    def __init__(self, source: SandboxSource, *, timeout_s: float = 10.0, output_chars: int = 4000) -> None:
        self._lease = _Lease(source, "ShellEnv")
        self._timeout = timeout_s
        self._output_chars = output_chars
        self._task: Optional[Task] = None
        self._cwd = ""  # "" = the workdir
        self._shell: Optional[str] = None  # "bash" or "sh", found on the first command
        self._check: Optional[list[str]] = None

    @property
    def cwd(self) -> str:
        """The session's working directory ("" until the first command reports it)."""
        return self._cwd

    def reset(self, task: Task) -> str:
        """Start a session in a clean sandbox; returns the task prompt."""
        check = task.data.get("check_command")
        self._check = None if check is None else _command(check, f"task {task.id!r}: check_command")
        self._lease.acquire()
        self._task, self._cwd = task, ""
        return task.prompt

    def _run(self, sb: Sandbox, command: str) -> ExecResult:
        if self._shell is None:
            r = sb.exec(["bash", "-c", _WRAPPER, "looplift", self._cwd, command], timeout=self._timeout)
            if r.exit_code in (126, 127) and _CWD_MARK not in r.stdout and not r.timed_out:
                self._shell = "sh"  # no bash in this image; the wrapper is POSIX sh
            else:
                self._shell = "bash"
                return r
        return sb.exec([self._shell, "-c", _WRAPPER, "looplift", self._cwd, command], timeout=self._timeout)

    def step(self, action: str) -> StepResult:
        """Run the action's command in the session and report its output and exit code (and the pool's stats)."""
        return self._lease.annotate(self._step(action))

    def _step(self, action: str) -> StepResult:
        blocks = [m.group(1) for m in _FENCE.finditer(action)]
        command = "\n".join(blocks) if blocks else action
        if not command.strip():
            self._sandbox()
            return StepResult(observation=SHELL_FORMAT_HINT, info={"format_error": True})
        return self.run(command)

    def _sandbox(self) -> Sandbox:
        sb = self._lease.sandbox
        if self._task is None or sb is None:
            raise RuntimeError("call ShellEnv.reset(task) before step()")
        return sb

    def run(self, command: str) -> StepResult:
        """Run `command` (a shell script, verbatim: no fence parsing) in the session; `step` without the parsing."""
        sb = self._sandbox()
        r = self._run(sb, command)
        output = r.stdout + r.stderr  # stderr is merged by the wrapper; this is the shell's own, if any
        mark = output.rfind("\n" + _CWD_MARK)
        if mark >= 0:
            self._cwd = output[mark + 1 + len(_CWD_MARK) :].splitlines()[0]
            output = output[:mark]
        elif not r.timed_out:
            self._cwd = self._saved_cwd(sb) or self._cwd  # marker lost to the output cap
        if r.timed_out:
            status = f"[timed out after {self._timeout:g}s; the session's state is as before this command]"
        elif r.oom_killed:
            status = "[killed: memory limit exceeded]"
        else:
            status = f"[exit code {r.exit_code}]"
        if r.stdout_truncated:
            status += " [output truncated by the sandbox]"
        obs = (_clip(output, self._output_chars).rstrip("\n") + "\n" + status).lstrip("\n")
        info: dict[str, Any] = {"exit_code": r.exit_code, "timed_out": r.timed_out, "cwd": self._cwd,
                                "duration_s": r.duration_s}
        if self._check is None:
            return StepResult(observation=obs, info=info)
        check = sb.exec(self._check, timeout=self._timeout)
        info["check_exit_code"] = check.exit_code
        return StepResult(observation=obs, reward=float(check.ok), done=check.ok, info=info)

    def snapshot(self) -> EnvSnapshot:
        """The session between two commands: the workdir (exported variables included, they live in
        its state file) and the working directory."""
        sb = self._sandbox()
        assert self._task is not None
        return EnvSnapshot(self._task, sb.snapshot(),
                           {"cwd": self._cwd, "shell": self._shell, "workdir": sb.workdir_path})

    def restore(self, snapshot: EnvSnapshot) -> None:
        """Continue the session of `snapshot` in a sandbox from this environment's source. A working directory
        inside the old sandbox's workdir moves to the same place in the new one (local sandboxes' workdirs differ,
        and one sandbox never sees another's)."""
        self.reset(snapshot.task)
        sb = self._sandbox()
        sb.restore(snapshot.workdir)
        cwd, old = str(snapshot.state.get("cwd") or ""), str(snapshot.state.get("workdir") or "")
        if old and (cwd == old or cwd.startswith(old.rstrip("/") + "/")):
            cwd = sb.workdir_path + cwd[len(old):]
        self._cwd = cwd
        self._shell = snapshot.state.get("shell")

    def _saved_cwd(self, sb: Sandbox) -> str:
        try:
            text = sb.read_file(_STATE_FILE).decode("utf-8", errors="replace")
        except SandboxError:  # no saved state (deleted by the session): keep the cwd we had
            return ""
        found = re.findall(rf"^# {_CWD_MARK}(.*)$", text, flags=re.MULTILINE)
        return found[-1] if found else ""

    def close(self) -> None:
        """Give the sandbox back (pool), close it (factory), or leave it open (a caller's sandbox)."""
        self._lease.release()
        self._task = None
