"""Each model family `looplift model build` writes, through the real stack as a user runs it: `looplift up --model DIR
--capture` (vLLM CPU with the family's tool parser and tokenizer mode), the official openai client with a named
tool call, streaming and a multi-turn tool conversation, capture into the collector, `collector export` (SFT and
GRPO), one SFT and one GRPO update trained on the exact ids vLLM sampled, each hot-swapped in and answering.

The models are built as `looplift model build` builds them by default (a short training on demonstrations in the
family's own format): an untrained model with a 32k-248k vocabulary fills a constrained tool call with whitespace
tokens until max_tokens, a trained one writes its family's call. A named tool_choice makes the name certain; vLLM
0.32 does not constrain the arguments to the schema (sampled at temperature 1 the small model sometimes writes
another tool's argument), so the test checks that the family's parser read back an object. The re-tokenization
drift (turns whose next prompt does not extend the previous prompt + sampled completion) is measured on the
captured sessions and printed per family; the trainer's rows carry the sampled ids whatever it is.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from _models import family_model
from _wait import wait_until

from sdk.infra import env_without_config

pytestmark = [pytest.mark.vllm, pytest.mark.model_build, pytest.mark.slow]
BIN = Path(sys.executable).parent
FAMILIES = ["qwen", "mistral", "qwen3-coder"]
LOOKUP = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "enum": ["48213"]}},
                   "required": ["order_id"]}}}
CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
#: Both tools the family builds are trained on. With one tool only, vLLM 0.32 constrains a pre-v11 Mistral model's
#: named call to a bare JSON array without the [TOOL_CALLS] it writes first, and an almost untrained model then
#: fills the grammar's whitespace until max_tokens (seen in 1 of 3 requests); with two it wrote its call.
TOOLS = [CALC, LOOKUP]
NAMED = {"type": "function", "function": {"name": "lookup_order"}}
QUESTION = [{"role": "user", "content": "Where is order 48213?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = env_without_config()
    env["LOOPLIFT_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, name_model_dir: Path) -> Path:
    """One LOOPLIFT_HOME for the families, holding a link to the session's name model: the collector of each
    `looplift up` loads it instead of training it (20-40 s)."""
    home = tmp_path_factory.mktemp("families-home")
    (home / "models").mkdir()
    (home / "models" / name_model_dir.name).symlink_to(name_model_dir, target_is_directory=True)
    return home


@pytest.fixture
def up(home: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The family's tiny model (built by `looplift model build` with its default training, cached by content hash:
    tests/_models.py), served by `looplift up --model DIR --capture` until the test ends."""
    family = request.param
    model = family_model(family)
    # Each family has its own database: what one test captured is not another's.
    (home / "collector.db").unlink(missing_ok=True)
    gw, col = _free_port(), _free_port()
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(BIN / "looplift"), "up", "--model", str(model), "--capture",
                                 "--gateway-port", str(gw), "--collector-port", str(col)],
                                env=_env(home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def ready() -> bool:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            try:
                return bool(httpx.get(f"http://127.0.0.1:{gw}/health").json().get("status") == "ok")
            except (httpx.HTTPError, ValueError):
                return False

        wait_until(ready, "looplift up's /health to say ok", timeout=600, every=1)
        yield {"family": family, "model": model, "gw": f"http://127.0.0.1:{gw}", "col": f"http://127.0.0.1:{col}",
               "home": home, "log": log_path, "proc": proc}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0, log_path.read_text()[-3000:]


def _client(stack: dict[str, Any], **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack["gw"] + "/v1", api_key="unused", default_headers=headers, max_retries=0)


def _tool_session(stack: dict[str, Any], session: str, task: str) -> list[str]:
    """One multi-turn tool conversation (a named call, its result, a streamed answer) as one captured session;
    returns its response ids."""
    c = _client(stack, **{"X-Looplift-Session": session, "X-Looplift-App": "families", "X-Looplift-Task": task})
    msgs: list[dict[str, Any]] = list(QUESTION)
    first = c.chat.completions.create(model="policy", messages=msgs, tools=TOOLS, tool_choice=NAMED,  # type: ignore[arg-type]
                                      max_tokens=48, temperature=1.0, logprobs=True,
                                      extra_body={"return_token_ids": True})
    (call,) = first.choices[0].message.tool_calls or []
    # The name is certain (named tool_choice); the arguments are what the small model wrote, parsed from its format.
    assert call.function.name == "lookup_order" and isinstance(json.loads(call.function.arguments), dict)
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "shipped on Monday"}]
    ids = [first.id]
    # Both turns ask for what GRPO trains on (the SDK asks the same): the sampled ids and their logprobs.
    with c.chat.completions.create(model="policy", messages=msgs, max_tokens=8, stream=True,  # type: ignore[arg-type]
                                   stream_options={"include_usage": True}, logprobs=True,
                                   extra_body={"return_token_ids": True}) as stream:
        for chunk in stream:
            ids.append(chunk.id)
    return [ids[0], ids[-1]]


def _feedback(stack: dict[str, Any], response_id: str, rating: float) -> None:
    r = httpx.post(stack["gw"] + "/v1/feedback", json={"response_id": response_id, "rating": rating}, timeout=30)
    assert r.status_code == 200, r.text


def _export(stack: dict[str, Any], fmt: str, out: Path) -> list[dict[str, Any]]:
    p = subprocess.run([str(BIN / "collector"), "export", "--format", fmt, "--out", str(out), "--app", "families"],
                       env=_env(stack["home"]), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _drift(stack: dict[str, Any], response_ids: list[str]) -> tuple[int, int]:
    """(turns whose next prompt does not extend prompt + sampled completion, turn transitions) in the captured
    trajectories these responses belong to."""
    from collector import open_store

    store = open_store(f"sqlite:///{stack['home'] / 'collector.db'}")
    try:
        trajs = [store.get(store.resolve_response(r) or "") for r in response_ids]
    finally:
        store.close()
    assert all(t is not None and len(t.turns) == 2 for t in trajs), trajs
    drifted = transitions = 0
    for t in trajs:
        for a, b in zip(t.turns, t.turns[1:]):  # type: ignore[union-attr]
            transitions += 1
            prefix = (a.prompt_token_ids or []) + (a.completion_token_ids or [])
            drifted += (b.prompt_token_ids or [])[:len(prefix)] != prefix
    return drifted, transitions


def _swap_and_ask(stack: dict[str, Any], adapter: Path) -> str:
    """Load `adapter` as a new version, promote it, and ask the alias: the version that answered."""
    from server import AdminClient

    token = (stack["home"] / "admin.token").read_text().strip()
    with AdminClient(stack["gw"], token) as admin:
        version = admin.load(str(adapter)).name
        admin.promote(version)
    r = httpx.post(stack["gw"] + "/v1/chat/completions", timeout=120,
                   json={"model": "policy", "messages": QUESTION, "max_tokens": 6})
    assert r.status_code == 200 and r.json()["choices"][0]["message"] is not None, r.text
    assert r.headers["x-looplift-version"] == version
    return version


@pytest.mark.parametrize("up", FAMILIES, indirect=True)
def test_a_family_goes_through_the_whole_loop(up: dict[str, Any], tmp_path: Path) -> None:
    from trainer import GRPOConfig, SFTConfig, episode_rows, load_grpo_jsonl, train_grpo, train_sft

    stack = up
    c = _client(stack)
    # A named tool call, not streamed and streamed: the family's parser reads what the constrained output wrote.
    named = c.chat.completions.create(model="policy", messages=QUESTION, tools=TOOLS, tool_choice=NAMED,  # type: ignore[arg-type]
                                      max_tokens=48, temperature=0)
    assert [t.function.name for t in named.choices[0].message.tool_calls or []] == ["lookup_order"], named
    names = []
    with c.chat.completions.create(model="policy", messages=QUESTION, tools=TOOLS, tool_choice=NAMED,  # type: ignore[arg-type]
                                   max_tokens=48, temperature=0, stream=True) as stream:
        for chunk in stream:
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                if tc.function and tc.function.name:
                    names.append(tc.function.name)
    assert names == ["lookup_order"]
    # Four sessions of one task, rated 1 / -1 alternately: an SFT export of the good ones, a GRPO group of four.
    sessions = [_tool_session(stack, f"{stack['family']}-s{i}", "order-48213") for i in range(4)]
    for i, ids in enumerate(sessions):
        _feedback(stack, ids[-1], 1.0 if i % 2 == 0 else -1.0)
    wait_until(lambda: sum(len(g["completions"]) for g in _export(stack, "grpo", tmp_path / "grpo.jsonl")) >= 4,
               "the four rated sessions in the GRPO export", timeout=60, every=1)
    sft = _export(stack, "sft", tmp_path / "sft.jsonl")
    assert sft, "the sessions rated 1 are SFT examples"
    # Exact ids: every loss token of the GRPO rows is a token vLLM sampled, in order.
    groups = load_grpo_jsonl(tmp_path / "grpo.jsonl")
    assert groups and all(g.episodes for g in groups)
    for g in groups:
        for ep in g.episodes:
            sampled = [i for turn in ep.turns for i in turn.completion_ids]
            assert [i for r in episode_rows(ep) for i, m in zip(r.ids, r.loss) if m] == sampled
    drifted, transitions = _drift(stack, [ids[0] for ids in sessions])
    assert transitions == 4
    print(f"\n{stack['family']}: re-tokenization drift {drifted} of {transitions} turns")
    sft_res = train_sft(stack["model"], tmp_path / "sft.jsonl", tmp_path / "sft-adapter",
                        SFTConfig(steps=2, batch_size=2))
    v_sft = _swap_and_ask(stack, sft_res.adapter_dir)
    grpo_res = train_grpo(stack["model"], tmp_path / "grpo.jsonl", tmp_path / "grpo-adapter",
                          GRPOConfig(minibatch=4, epochs=1))
    assert grpo_res.stats.trained, grpo_res.stats
    v_grpo = _swap_and_ask(stack, grpo_res.adapter_dir)
    assert v_sft != v_grpo
