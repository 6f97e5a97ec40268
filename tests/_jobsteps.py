"""Helpers for the retrain-job tests that need no vLLM: a gateway faked at its HTTP transport (admin API
and chat completions), train steps that write an adapter directory without torch, and collector data.

The train steps are importable by path (`--algo _jobsteps:slow_step`) so that subprocess tests (the
scheduler race, SIGTERM) can use them: `slow_step` writes `$LOOPLIFT_TEST_MARKER.<pid>` when training
starts and then waits for `$LOOPLIFT_TEST_RELEASE` to exist.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Optional

import httpx

from sdk import Message, Outcome, Trajectory, wire
from trainer import JobContext, TrainData, Trained, TrainStep, prompt_suite
from trainer._steps import SFT_STEP


def _write_adapter(ctx: JobContext) -> Path:
    out = ctx.run_dir / "adapter"
    out.mkdir()
    (out / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return out


def _quick_train(ctx: JobContext, data: TrainData) -> Trained:
    return Trained(_write_adapter(ctx), 0.1, data.count)


def _slow_train(ctx: JobContext, data: TrainData) -> Trained:
    marker, release = os.environ["LOOPLIFT_TEST_MARKER"], os.environ["LOOPLIFT_TEST_RELEASE"]
    Path(f"{marker}.{os.getpid()}").write_text(ctx.run_id)
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        ctx.check_stop()
        time.sleep(0.05)
    return Trained(_write_adapter(ctx), 0.1, data.count)


#: The real SFT export, a torch-free "training" that writes an adapter directory.
quick_step = TrainStep("quick", SFT_STEP.export, _quick_train)
#: The same, but training waits for a release file (see the module docstring).
slow_step = TrainStep("slow", SFT_STEP.export, _slow_train)


def add_trajectories(db_url: str, n: int, *, app: str = "shop", start: int = 0, reward: float = 1.0,
                     version: str = "policy-v0") -> None:
    """`n` scored trajectories of `app` in the collector database (not anonymized: fast)."""
    from collector import open_store

    store = open_store(db_url)
    try:
        store.add_trajectories([
            Trajectory(id=f"{app}-{i}", app=app, task_id=f"task-{i}", model="policy", served_version=version,
                       messages=[Message(role="user", content=f"What is {i}+1?"),
                                 Message(role="assistant", content=str(i + 1))],
                       outcome=Outcome(success=reward >= 1, reward=reward))
            for i in range(start, start + n)], anonymize=False)
    finally:
        store.close()


def plus_one_suite(n: int = 40, *, slices: Optional[dict[int, str]] = None) -> Any:
    """A prompt suite: "What is i+1?" -> "i+1", exact checker."""
    cases = [{"id": f"q{i}", "turns": [f"What is {i}+1?"], "expected": str(i + 1),
              **({"slice": slices[i]} if slices and i in slices else {})} for i in range(n)]
    return prompt_suite(cases, name="plus-one", max_tokens=8)


class FakeGateway:
    """The gateway's admin API and chat completions, in memory; `skill[version]` is the set of i that
    version answers right. `refuse` makes adapter loads fail with a 422 as the real gateway does,
    `refuse_unload` unloads fail with a 502. `events` is every chat ("chat <version>") and unload
    ("unload <version>") in order."""

    def __init__(self, skill: dict[str, set[int]], *, serving: str = "policy-v0", refuse: bool = False) -> None:
        self.skill = skill
        self.serving = serving
        self.refuse = refuse
        self.versions = [serving]
        self.promoted: list[str] = []
        self.canaries: list[tuple[str, float]] = []
        self.next_skill: set[int] = set()
        self.refuse_unload = False
        self.unloaded: list[str] = []
        self.events: list[str] = []
        self.paths: dict[str, str] = {}

    # -- admin ---------------------------------------------------------------------------------------
    def _info(self, name: str) -> dict[str, Any]:
        return {"name": name, "adapter_path": self.paths.get(name), "state": "unloaded" if name in self.unloaded else "loaded",
                "created_at": "2026-01-01T00:00:00Z", "serving": name == self.serving}

    def _admin(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/admin/versions" and request.method == "GET":
            return httpx.Response(200, json={"alias": "policy", "serving": self.serving,
                                             "versions": [self._info(v) for v in self.versions]})
        if request.url.path == "/admin/versions" and request.method == "POST":
            if self.refuse:
                return httpx.Response(422, json=wire.error_body(422, "adapter_config.json: rank 3 is not supported"))
            name = f"policy-v{len(self.versions)}"
            self.versions.append(name)
            self.paths[name] = json.loads(request.content)["path"]
            self.skill.setdefault(name, set(self.next_skill))
            return httpx.Response(201, json=self._info(name))
        if request.url.path.startswith("/admin/versions/") and request.method == "DELETE":
            name = request.url.path.rsplit("/", 1)[1]
            self.events.append(f"unload {name}")
            if self.refuse_unload:
                return httpx.Response(502, json=wire.error_body(502, "vLLM cannot be reached"))
            self.unloaded.append(name)
            return httpx.Response(200, json=self._info(name))
        if request.url.path == "/admin/promote":
            version = json.loads(request.content)["version"]
            previous, self.serving = self.serving, version
            self.promoted.append(version)
            return httpx.Response(200, json={"alias": "policy", "serving": version, "previous": previous,
                                             "swap_ms": 1.0})
        if request.url.path == "/admin/canary" and request.method == "POST":
            body = json.loads(request.content)
            self.canaries.append((body["version"], body["fraction"]))
            return httpx.Response(200, json={"alias": "policy", "serving": self.serving, "canary": {
                "version": body["version"], "fraction": body["fraction"], "started_at": "2026-01-01T00:00:00Z"}})
        return httpx.Response(404, json=wire.error_body(404, f"no fake route {request.url.path}"))

    def admin(self) -> Any:
        from server import AdminClient

        return AdminClient("http://gateway.test", "token", transport=httpx.MockTransport(self._admin))

    # -- chat ----------------------------------------------------------------------------------------
    def _chat(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        model = body["model"]
        if model == "policy":
            model = self.serving
        self.events.append(f"chat {model}")
        m = re.search(r"What is (\d+)\+1\?", body["messages"][-1]["content"])
        i = int(m.group(1)) if m else -1
        text = str(i + 1) if i in self.skill.get(model, set()) else "no idea"
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})

    def chat(self) -> Any:
        import openai

        return openai.AsyncOpenAI(base_url="http://gateway.test/v1", api_key="x",
                                  http_client=httpx.AsyncClient(transport=httpx.MockTransport(self._chat)))


def even_length(reply: str, expected: Optional[str]) -> bool:
    """A checker for an untrained model's random text: about half the replies pass, decided by the text."""
    return len(reply) % 2 == 0
