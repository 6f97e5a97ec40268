"""Held-out tests that the code under test cannot fool: the tests run in a process that never imports it.

The coding family's verdict must not depend on anything the candidate module can influence. A test
runner that imports the module and reports "OK" can be fooled many ways: `sys.exit(0)` or
`os._exit(0)` at import, printing a fake "Ran 5 tests ... OK", shadowing `unittest`/`pytest` with a
file of that name, a `conftest.py` or `sitecustomize.py`, an object whose `__eq__` is always True.
So the verdict comes from two processes in the sandbox:

  * the **judge** (trusted; `python3 -I -S`, so no `sitecustomize`, no user site, not the workdir on
    `sys.path`) reads its secrets from stdin: a nonce, the problem's prompt code (the helpers the tests
    use, e.g. `poly` next to `find_zero`) and the test code. It marks itself non-dumpable
    (`PR_SET_DUMPABLE=0`: its `/proc/PID/{fd,mem,environ}` become root-owned, so a same-uid process
    cannot read its memory or write into its stdout), then starts the candidate process and runs the
    test's `check(candidate)` with `candidate` a proxy;
  * the **candidate** process (`python3 -I -S`) imports the solution file by path and answers one call
    at a time over a pair of pipes. Its own stdout/stderr go to a capped buffer (shown as feedback),
    never to the judge's stdout.

Only plain data crosses the pipe, encoded with explicit types (None, bool, int, float, str, bytes,
list, tuple, dict, set, frozenset, exactly those classes, not subclasses): an "always equal" object, a
generator or anything else is refused and the call fails. A candidate that exits, hangs (per-call
timeout), crashes or garbles the protocol fails the test. The judge prints one line,
`LOOPLIFT-HIDDEN <nonce> <json>`, and the host accepts only that line with the nonce it sent, so text
printed by anything else cannot pass for a verdict.

What `test` holds is the caller's: the coding family grades on `_humaneval.hidden_test`, which shares
no assert and no input with the task's visible file (HumanEval's asserts that no task shows, plus
cases generated from the reference solution at build time), so answering the visible inputs from a
table does not pass it.

Deliberately not defended here: a candidate that *knows* the held-out tests (HumanEval is public; a
model that memorised them can special-case inputs; the generated cases are in the package's manifest).
The held-out split is by problem, so training never shows the hidden tests of a held-out problem.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from sandboxes import Sandbox

__all__ = ["HiddenResult", "run_hidden"]

_MARK = "LOOPLIFT-HIDDEN"

# Shared by both processes: the typed encoding of values that cross the pipe.
_CODEC = r'''
import base64, json, math

MAX_ITEMS = 200000


class Refused(Exception):
    pass


def enc(v, budget=None):
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        raise Refused("value too large")
    t = type(v)
    if v is None:
        return ["n"]
    if t is bool:
        return ["b", v]
    if t is int:
        return ["i", str(v)]
    if t is float:
        return ["f", repr(v)]
    if t is str:
        return ["s", v]
    if t is bytes:
        return ["y", base64.b64encode(v).decode()]
    if t is list or t is tuple or t is set or t is frozenset:
        tag = {list: "l", tuple: "t", set: "S", frozenset: "F"}[t]
        return [tag, [enc(x, budget) for x in v]]
    if t is dict:
        return ["d", [[enc(k, budget), enc(x, budget)] for k, x in v.items()]]
    raise Refused("values of type %s cannot be returned here (plain data only)" % t.__name__)


def dec(e):
    tag = e[0]
    if tag == "n":
        return None
    if tag == "b":
        return bool(e[1])
    if tag == "i":
        return int(e[1])
    if tag == "f":
        return float(e[1])
    if tag == "s":
        return str(e[1])
    if tag == "y":
        return base64.b64decode(e[1])
    if tag in ("l", "t", "S", "F"):
        items = [dec(x) for x in e[1]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag == "d":
        return {dec(k): dec(x) for k, x in e[1]}
    raise ValueError("bad tag %r" % (tag,))


def send(fd, obj):
    data = json.dumps(obj).encode()
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data):]


def recv(fd, deadline=None):
    head = _read(fd, 4, deadline)
    return json.loads(_read(fd, int.from_bytes(head, "big"), deadline))


def _read(fd, n, deadline):
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
'''

# The candidate side: import the solution by path, then answer calls until EOF.
_CANDIDATE = r'''
import importlib.util, os, select, sys, time, traceback
''' + _CODEC + r'''

def main():
    path, entry, rfd, wfd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    try:
        spec = importlib.util.spec_from_file_location("solution", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["solution"] = mod
        spec.loader.exec_module(mod)
        fn = getattr(mod, entry)
    except BaseException:
        send(wfd, {"import_error": traceback.format_exc(limit=5)[-1500:]})
        return
    send(wfd, {"ready": True})
    while True:
        try:
            req = recv(rfd)
        except EOFError:
            return
        try:
            value = fn(*dec(req["args"]), **dec(req["kwargs"]))
            reply = {"value": enc(value)}
        except Refused as e:
            reply = {"raised": "returned an unsupported value: %s" % e}
        except BaseException as e:
            reply = {"raised": "%s: %s" % (type(e).__name__, str(e)[:300])}
        send(wfd, reply)


main()
'''

# The judge: reads {nonce, prompt, test, entry_point, call_timeout} from stdin, prints one verdict line.
#: The first step of each judge script run in a sandbox (here and the integrity check's, `_verify.py`), which
#: imports ctypes, json and sys first: read the spec (its secrets) from stdin, close it, and make the process
#: non-dumpable (the candidate's processes, same uid, cannot ptrace it or read its memory through /proc).
READ_SPEC = r'''
def read_spec():
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        pass
    return spec
'''

_JUDGE = r'''
import ctypes, os, select, subprocess, sys, threading, time, traceback
''' + _CODEC + READ_SPEC + r'''

class CandidateFailed(Exception):
    pass


def main():
    spec = read_spec()
    nonce, timeout = spec["nonce"], float(spec["call_timeout"])
    verdict = {"passed": False, "calls": 0}
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-u", "-B", "-c", spec["candidate_src"], spec["path"], spec["entry_point"],
         str(req_r), str(rep_w)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(req_r, rep_w),
        cwd=os.path.dirname(spec["path"]) or ".")
    os.close(req_r)
    os.close(rep_w)
    out = bytearray()

    def drain():
        while True:
            chunk = child.stdout.read1(65536) if hasattr(child.stdout, "read1") else child.stdout.read(65536)
            if not chunk:
                return
            if len(out) < 4000:
                out.extend(chunk[: 4000 - len(out)])

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()

    def candidate(*args, **kwargs):
        verdict["calls"] += 1
        try:
            send(req_w, {"args": enc(list(args)), "kwargs": enc(dict(kwargs))})
            reply = recv(rep_r, time.monotonic() + timeout)
        except TimeoutError:
            raise CandidateFailed("call %d timed out after %gs" % (verdict["calls"], timeout))
        except (EOFError, OSError, ValueError):
            raise CandidateFailed("the solution process exited or broke the protocol during call %d" % verdict["calls"])
        if "raised" in reply:
            raise CandidateFailed("call %d raised %s" % (verdict["calls"], reply["raised"]))
        try:
            return dec(reply["value"])
        except Exception:
            raise CandidateFailed("call %d returned a malformed value" % verdict["calls"])

    try:
        hello = recv(rep_r, time.monotonic() + timeout)
        if "import_error" in hello:
            raise CandidateFailed("importing the solution failed:\n" + str(hello["import_error"]))
        if hello != {"ready": True}:
            raise CandidateFailed("the solution process broke the protocol")
        ns = {"__name__": "hidden_tests"}
        exec(compile(spec["prompt"], "<prompt>", "exec"), ns)
        ns[spec["entry_point"]] = candidate  # some tests call the function by its name, not `candidate`
        exec(compile(spec["test"], "<hidden-test>", "exec"), ns)
        ns["check"](candidate)
        verdict["passed"] = True
        verdict["reason"] = "all hidden tests passed"
    except CandidateFailed as e:
        verdict["reason"] = str(e)
    except (TimeoutError, EOFError, OSError):
        verdict["reason"] = "the solution process exited before it was ready"
    except AssertionError as e:
        line = next((f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<hidden-test>"), None)
        text = spec["test"].splitlines()[line - 1].strip() if line else ""
        verdict["reason"] = "hidden test failed at line %s: %s" % (line, text[:300])
        verdict["line"] = line
    except BaseException as e:
        verdict["reason"] = "hidden tests raised %s: %s" % (type(e).__name__, str(e)[:300])
    finally:
        try:
            child.kill()
            child.wait(5)
            drainer.join(2)
        except Exception:
            pass
    verdict["output"] = out.decode("utf-8", "replace")
    sys.stdout.write("\n%s %s %s\n" % ("''' + _MARK + r'''", nonce, json.dumps(verdict)))
    sys.stdout.flush()


main()
'''


@dataclass(frozen=True)
class HiddenResult:
    """The verdict of one held-out test run."""

    passed: bool
    #: Why it failed (or "all hidden tests passed"): the failing assert's line, a timeout, an import error.
    reason: str
    #: Calls made to the candidate function before the verdict.
    calls: int = 0
    #: What the solution printed (its own stdout and stderr, first 4,000 characters).
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_hidden(
    sandbox: Sandbox,
    solution: str,
    *,
    prompt: str,
    test: str,
    entry_point: str,
    call_timeout: float = 5.0,
    timeout: float = 30.0,
) -> HiddenResult:
    """Write `solution` as `solution.py` into `sandbox` (which should be clean) and run the held-out
    `test` (HumanEval style: a `check(candidate)` function) against its `entry_point`.

    `prompt` is trusted code whose definitions the tests may use (helpers such as `poly`); it runs in
    the judge, never the candidate's copy of it. Nothing but the solution file is written into the
    sandbox; the test code reaches the judge on stdin.
    """
    sandbox.write_file("solution.py", solution)
    nonce = secrets.token_hex(16)
    path = sandbox.workdir_path.rstrip("/") + "/solution.py"
    spec = {"nonce": nonce, "prompt": prompt, "test": test, "entry_point": entry_point,
            "call_timeout": call_timeout, "path": path, "candidate_src": _CANDIDATE}
    r = sandbox.exec(["python3", "-I", "-S", "-c", _JUDGE], stdin=json.dumps(spec), timeout=timeout)
    if r.timed_out:
        return HiddenResult(False, f"the hidden tests timed out after {timeout:g}s", timed_out=True,
                            duration_s=r.duration_s)
    for line in reversed(r.stdout.splitlines()):
        head, _, rest = line.partition(" ")
        got_nonce, _, body = rest.partition(" ")
        if head == _MARK and secrets.compare_digest(got_nonce, nonce):
            v = json.loads(body)
            return HiddenResult(bool(v["passed"]), str(v.get("reason", "")), int(v.get("calls", 0)),
                                str(v.get("output", "")), duration_s=r.duration_s)
    tail = (r.stdout + r.stderr).strip()[-500:]
    return HiddenResult(False, f"the hidden test judge gave no verdict (exit code {r.exit_code}): {tail}",
                        duration_s=r.duration_s)
