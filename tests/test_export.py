"""`collector export` on real Store data (SQLite, and Postgres when LOOPLIFT_TEST_POSTGRES_URL is set):
every format's shape and content, every filter, dedup, balance, holdout, decontamination, bad input."""

from __future__ import annotations

import json
import random
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from _curate_data import make, sentence
from _trajs import traj
from typer.testing import CliRunner

from collector import ConfigError, Store, UnsupportedFormatError, export, open_store
from collector._cli import app as cli_app
from collector._curate import score
from collector._dedup import NearDupFilter
from collector._export_manifest import holdout_path_for, in_holdout
from sdk._types import Feedback, Message, ToolCall, ToolCallFunction, Trajectory


def lines(p: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def seed(store: Store, n: int = 240, *, labeled_every: int = 3, seed_: int = 0) -> list[Any]:
    """`n` synthetic trajectories over 40 tasks, 2 apps, 2 versions; every `labeled_every`-th (none if 0) has no outcome."""
    rng = random.Random(seed_)
    ts = [make(i, good=rng.random() < 0.5, rng=rng, labeled=not labeled_every or i % labeled_every != 0, app="a" if i % 2 else "b",
               version="policy-v1" if i < n // 2 else "policy-v2") for i in range(n)]
    store.add_trajectories(ts, anonymize=False)
    return ts


# ---- sft ---------------------------------------------------------------------------------------


def _ingest_small(db_url: str) -> None:
    store = open_store(db_url)
    store.add_trajectories([traj(i, reward=r, app="a" if i % 2 else "b") for i, r in enumerate([1.0, 0.2, 0.9, None, 0.5])])
    store.close()


def test_sft_content_order_and_manifest(db_url: str, tmp_path: Path) -> None:
    _ingest_small(db_url)
    out = tmp_path / "out" / "sft.jsonl"
    m = export(db_url, out, format="sft", batch_size=2)  # several pages
    got = lines(out)
    assert m.count == 5 == len(got) == m.trajectories == m.matched and m.dropped == {}
    assert [x["id"] for x in got] == [f"traj-{i:04d}" for i in range(5)]
    first = got[0]
    assert set(first) == {"id", "task_id", "app", "served_version", "reward", "score", "corrected", "messages"}
    assert first["messages"][1]["tool_calls"][0]["function"] == {"name": "python", "arguments": '{"code": "print(2+2)"}'}
    assert first["messages"][2] == {"role": "tool", "content": "4", "tool_call_id": "c1"}
    assert (first["reward"], first["score"], first["corrected"]) == (1.0, 1.0, False)
    manifest = json.loads((tmp_path / "out" / "sft.manifest.json").read_text())
    assert manifest["count"] == 5 and manifest["format"] == "sft" and manifest["by_app"] == {"a": 2, "b": 3}
    assert manifest["filters"]["min_reward"] is None and manifest["holdout"] is None
    assert not list((tmp_path / "out").glob(".*tmp"))  # temp files renamed or removed


def test_interrupted_export_keeps_the_previous_files_whole(db_url: str, tmp_path: Path) -> None:
    _ingest_small(db_url)
    out = tmp_path / "out" / "sft.jsonl"
    export(db_url, out, holdout=0.5)
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    assert len(before) == 3 and (out.stat().st_mode & 0o777) == 0o600  # data, holdout, manifest; data private

    def interrupt(_read: int) -> None:  # as Ctrl-C would, after the first page was written
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export(db_url, out, holdout=0.5, batch_size=1, progress=interrupt)
    # No temporary file left, and the previous export's three files untouched, byte for byte.
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before


@pytest.mark.slow
def test_every_filter(store: Store, tmp_path: Path) -> None:
    ts = seed(store)
    by_id = {t.id: t for t in ts}

    def ids(**kw: Any) -> list[str]:
        out = tmp_path / "f.jsonl"
        m = export(store, out, **kw)
        got = [x["id"] for x in lines(out)]
        assert m.count == len(got)
        return got

    assert len(ids()) == 240
    assert all(by_id[i].app == "a" for i in ids(app="a")) and len(ids(app="a")) == 120
    assert set(ids(task="math-0")) == {t.id for t in ts if t.task_id == "math-0"}
    assert set(ids(model_version="policy-v2")) == {t.id for t in ts if t.served_version == "policy-v2"}
    assert set(ids(min_reward=1.0)) == {t.id for t in ts if t.outcome and t.outcome.reward >= 1.0}
    assert set(ids(min_score=0.5)) == set(ids(min_reward=0.5))  # no quality model yet: score = reward
    assert ids(limit=7, batch_size=3) == ids()[:7]
    future = datetime.now(timezone.utc) + timedelta(days=1)
    assert ids(since=future) == [] and len(ids(until=future)) == 240
    assert ids(until=datetime(2000, 1, 1)) == []
    # combined
    got = ids(app="b", model_version="policy-v1", min_reward=1.0)
    assert got and all(by_id[i].app == "b" and by_id[i].served_version == "policy-v1" and by_id[i].outcome.success for i in got)


@pytest.mark.slow
def test_min_score_uses_composed_score_after_scoring(store: Store, tmp_path: Path) -> None:
    seed(store)
    score(store, retrain=True)
    m = export(store, tmp_path / "s.jsonl", min_score=0.7)
    got = lines(tmp_path / "s.jsonl")
    assert m.count == len(got) > 0 and all(x["score"] >= 0.7 for x in got)
    assert any(x["reward"] is None for x in got)  # model-scored rows pass too


def test_correction_is_the_sft_target_and_a_dpo_pair(store: Store, tmp_path: Path) -> None:
    """An SDK trajectory (user -> tool call -> tool output -> answer) corrected by trajectory id: the correction
    replaces the last assistant message, the tool call and its output kept. Catches: the correction cut after
    the first prompt (the tool step dropped, teaching the model to skip it), and a DPO pair that rejects
    everything after the first prompt instead of the corrected answer."""
    store.add_trajectories([traj(1, reward=0.0), traj(2, reward=None)])
    store.add_feedback(Feedback(trajectory_id="traj-0001", rating=-1, correction="The answer is 4."))
    m = export(store, tmp_path / "sft.jsonl", min_score=0.5)  # the corrected one passes min_score
    (line,) = lines(tmp_path / "sft.jsonl")
    assert m.count == 1 and line["id"] == "traj-0001" and line["corrected"] is True
    user, call, output = line["messages"][:3]
    assert user == {"role": "user", "content": "2+2?"} and call["tool_calls"][0]["function"]["name"] == "python"
    assert output == {"role": "tool", "content": "4", "tool_call_id": "c1"}
    assert line["messages"][3:] == [{"role": "assistant", "content": "The answer is 4."}]
    assert export(store, tmp_path / "n.jsonl", min_score=0.5, corrections=False).count == 0
    export(store, tmp_path / "dpo.jsonl", format="dpo")
    (pair,) = [x for x in lines(tmp_path / "dpo.jsonl") if x["source"] == "correction"]
    assert pair["chosen"] == [{"role": "assistant", "content": "The answer is 4."}] and pair["rejected_id"] == "traj-0001"
    assert pair["prompt"] == [user, call, output] and pair["rejected"] == [{"role": "assistant", "content": "4"}]


def test_single_turn_correction_exports_as_before(store: Store, tmp_path: Path) -> None:
    """A one-answer conversation, the common case: the prompt (system included) plus the correction, and the
    pair rejects that answer, as before multi-turn corrections. Catches: a rule that drops part of the prompt or
    keeps the wrong answer beside the correction."""
    t = Trajectory(id="one", task_id="t", model="m", messages=[
        Message(role="system", content="Be brief."), Message(role="user", content="2+2?"),
        Message(role="assistant", content="5")])
    store.add_trajectories([t])
    store.add_feedback(Feedback(trajectory_id="one", rating=-1, correction="4"))
    export(store, tmp_path / "sft.jsonl")
    export(store, tmp_path / "dpo.jsonl", format="dpo")
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert lines(tmp_path / "sft.jsonl")[0]["messages"] == prompt + [{"role": "assistant", "content": "4"}]
    (pair,) = lines(tmp_path / "dpo.jsonl")
    assert (pair["prompt"], pair["chosen"]) == (prompt, [{"role": "assistant", "content": "4"}])
    assert pair["rejected"] == [{"role": "assistant", "content": "5"}]


def test_assistant_messages_the_client_wrote_are_weighed_zero(store: Store, tmp_path: Path) -> None:
    """A captured conversation whose history holds an assistant message the application wrote (a made-up tool
    call: no exchange produced it) trains only on what the model wrote; a correction of the model's last answer
    keeps that history as it is. Mutants: no weight (the SFT loss fits the application's message),
    weight on the model's messages, weights on a capture from before `message_index` (nothing there tells
    the messages apart: all train)."""
    from sdk import wire

    ms = [Message(role="user", content="2+2?"), Message(role="assistant", content="4"),
          Message(role="user", content="and 3+3?"),
          Message(role="assistant", tool_calls=[ToolCall(id="c1", function=ToolCallFunction(name="calc",
                                                                                            arguments="{}"))]),
          Message(role="tool", tool_call_id="c1", content="6"), Message(role="assistant", content="7")]
    exchanges = [{"response_id": "chatcmpl-a", "message_index": 1}, {"response_id": "chatcmpl-b", "message_index": 5}]
    old = [{"response_id": "chatcmpl-c"}, {"response_id": "chatcmpl-d"}]
    store.add_trajectories([
        Trajectory(id="cap", task_id="t", model="m", messages=ms, metadata={wire.EXCHANGES_KEY: exchanges}),
        Trajectory(id="old", task_id="t", model="m", messages=ms, metadata={wire.EXCHANGES_KEY: old}),
        Trajectory(id="sdk", task_id="t", model="m", messages=ms)])
    export(store, tmp_path / "sft.jsonl", corrections=False)
    weights = {x["id"]: [m.get("weight") for m in x["messages"]] for x in lines(tmp_path / "sft.jsonl")}
    assert weights == {"cap": [None, None, None, 0, None, None], "old": [None] * 6, "sdk": [None] * 6}
    store.add_feedback(Feedback(trajectory_id="cap", rating=-1, correction="6"))  # corrects the last: index 5
    export(store, tmp_path / "fixed.jsonl")
    (fixed,) = [x for x in lines(tmp_path / "fixed.jsonl") if x["id"] == "cap"]
    assert fixed["corrected"] and fixed["messages"][-1] == {"role": "assistant", "content": "6"}
    assert [m.get("weight") for m in fixed["messages"]] == [None, None, None, 0, None, None]


# ---- dpo / grpo --------------------------------------------------------------------------------


@pytest.mark.slow
def test_dpo_pairs_share_task_and_prompt_and_chosen_scores_higher(store: Store, tmp_path: Path) -> None:
    ts = seed(store)
    score(store, retrain=True)
    by_id = {t.id: t for t in ts}
    rows = {t.id: store.get(t.id) for t in ts}
    m = export(store, tmp_path / "dpo.jsonl", format="dpo")
    pairs = lines(tmp_path / "dpo.jsonl")
    assert m.count == len(pairs) > 30
    used: list[str] = []
    for p in pairs:
        ch, rj = by_id[p["chosen_id"]], by_id[p["rejected_id"]]
        assert p["source"] == "score" and ch.task_id == rj.task_id == p["task_id"]
        assert p["chosen_score"] > p["rejected_score"]
        prompt = [m.model_dump(exclude_none=True) for m in ch.messages[:2]]
        assert p["prompt"] == prompt == [m.model_dump(exclude_none=True) for m in rj.messages[:2]]
        assert p["chosen"] == [m.model_dump(exclude_none=True, mode="json") for m in rows[ch.id].messages[2:]]  # type: ignore[union-attr]
        assert p["rejected"][0]["role"] == "assistant"
        used += [ch.id, rj.id]
    assert len(used) == len(set(used)) == m.trajectories  # each trajectory in at most one pair


def test_dpo_needs_the_same_prompt(store: Store, tmp_path: Path) -> None:
    rng = random.Random(1)
    store.add_trajectories([make(0, good=True, rng=rng, task="t", prompt="first prompt"),
                            make(1, good=False, rng=rng, task="t", prompt="another prompt")], anonymize=False)
    m = export(store, tmp_path / "dpo.jsonl", format="dpo")
    assert m.count == 0 and m.dropped == {"unpaired": 2}


def test_grpo_groups_carry_rewards_and_token_ids(store: Store, tmp_path: Path) -> None:
    ts = seed(store, labeled_every=0)  # all labeled
    by_id = {t.id: t for t in ts}
    m = export(store, tmp_path / "grpo.jsonl", format="grpo")
    groups = lines(tmp_path / "grpo.jsonl")
    assert m.count == len(groups) == 40 and m.trajectories == 240
    for g in groups:
        members = [by_id[c["id"]] for c in g["completions"]]
        assert {t.task_id for t in members} == {g["task_id"]} and len(members) >= 2
        assert g["rewards"] == [t.outcome.reward for t in members]  # type: ignore[union-attr]
        for c, t in zip(g["completions"], members):
            assert c["reward"] == t.outcome.reward and c["success"] == t.outcome.success  # type: ignore[union-attr]
            assert c["served_version"] == t.served_version
            assert len(c["turns"]) == len(t.turns) > 0
            for turn, src in zip(c["turns"], t.turns):
                assert turn["completion_token_ids"] == src.completion_token_ids
                assert turn["completion_logprobs"] == src.completion_logprobs
                assert c["messages"][turn["message_index"]]["role"] == "assistant"  # index into the completion


def test_grpo_drops_singletons_and_unscored(store: Store, tmp_path: Path) -> None:
    rng = random.Random(2)
    store.add_trajectories([make(0, good=True, rng=rng, task="alone"), make(1, good=True, rng=rng, task="x", labeled=False),
                            make(2, good=False, rng=rng, task="x")], anonymize=False)
    m = export(store, tmp_path / "g.jsonl", format="grpo")
    assert m.count == 0 and m.dropped == {"group_too_small": 2, "no_score": 1}


# ---- dedup, balance, holdout, decontamination -----------------------------------------------------


def test_exact_and_near_duplicates_are_dropped_keeping_the_first(store: Store, tmp_path: Path) -> None:
    rng = random.Random(3)
    base = [make(i, good=True, rng=rng, pad_to=4000) for i in range(30)]
    exact = [b.model_copy(update={"id": f"exact-{i}", "started_at": b.started_at}) for i, b in enumerate(base[:5])]
    near = []
    for i, b in enumerate(base[5:12]):
        msgs = [m.model_copy() for m in b.messages]
        words = (msgs[3].content or "").split()  # the padded observation
        for k in range(0, len(words), 60):  # ~1.5% of the words changed
            words[k] = "edited"
        msgs[3] = msgs[3].model_copy(update={"content": " ".join(words)})
        near.append(b.model_copy(update={"id": f"near-{i}", "messages": msgs}))
    store.add_trajectories(base, anonymize=False)
    store.add_trajectories(exact + near, anonymize=False)  # ingested later: the originals are kept
    m = export(store, tmp_path / "d.jsonl", dedup=True)
    got = {x["id"] for x in lines(tmp_path / "d.jsonl")}
    assert got == {b.id for b in base}
    assert m.dropped == {"exact_duplicate": 5, "near_duplicate": 7} and m.matched == 42
    assert export(store, tmp_path / "all.jsonl").count == 42


@pytest.mark.slow
def test_near_duplicate_precision_and_recall_on_planted_set() -> None:
    """400 distinct texts (600 words, one shared vocabulary) and 200 planted near-copies (3-9 words of 600
    replaced, inserted or deleted: Jaccard of 5-shingles >= ~0.85): the filter must catch the copies and
    spare the rest (precision measured on 300 fresh texts against everything kept)."""
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(3000)]
    docs = [[rng.choice(vocab) for _ in range(600)] for _ in range(400)]
    planted = []
    for _ in range(200):
        w = list(rng.choice(docs))
        for _ in range(rng.randint(3, 9)):
            op = rng.random()
            k = rng.randrange(len(w))
            if op < 0.6:
                w[k] = rng.choice(vocab)
            elif op < 0.8:
                w.insert(k, rng.choice(vocab))
            else:
                del w[k]
        planted.append(w)
    f = NearDupFilter(600)
    assert not any(f.seen(" ".join(d)) for d in docs)  # no false positive among distinct texts
    caught = sum(f.seen(" ".join(w)) for w in planted)
    recall = caught / len(planted)
    assert recall >= 0.95, recall
    fresh = [" ".join(rng.choice(vocab) for _ in range(600)) for _ in range(300)]
    false_pos = sum(f.seen(d) for d in fresh)
    precision = caught / (caught + false_pos)
    assert precision >= 0.99, precision


def test_balance_by_task_equalizes_groups(store: Store, tmp_path: Path) -> None:
    rng = random.Random(4)
    sizes = {"big": 120, "mid": 40, "small": 8}
    ts = [make(i, good=True, rng=rng, task=task) for i, (task, n) in enumerate((t, n) for t, n in sizes.items() for _ in range(n))]
    for i, t in enumerate(ts):
        t.id = f"b{i:04d}"
    store.add_trajectories(ts, anonymize=False)
    m = export(store, tmp_path / "b.jsonl", balance="task", per_group=8)
    counts: dict[str, int] = {}
    for x in lines(tmp_path / "b.jsonl"):
        counts[x["task_id"]] = counts.get(x["task_id"], 0) + 1
    assert counts["small"] == 8  # a group at or under the cap is kept whole
    assert 3 <= counts["big"] <= 14 and 3 <= counts["mid"] <= 14  # ~8 each (Bernoulli on an id hash)
    assert m.dropped["balance"] == 168 - m.count and m.filters.per_group == 8
    again = export(store, tmp_path / "b2.jsonl", balance="task", per_group=8)
    assert again.sha256 == m.sha256  # deterministic
    # default cap: fit --limit
    m2 = export(store, tmp_path / "b3.jsonl", balance="task", limit=60)
    assert m2.filters.per_group == 26 and m2.count <= 60


@pytest.mark.slow
def test_balance_by_cluster_uses_scored_clusters(store: Store, tmp_path: Path) -> None:
    seed(store)
    score(store, retrain=True, clusters=4)
    m = export(store, tmp_path / "c.jsonl", balance="cluster", per_group=10)
    assert 15 <= m.count <= 60 and m.dropped["balance"] == 240 - m.count


@pytest.mark.slow
def test_holdout_is_task_disjoint_deterministic_and_sized(store: Store, tmp_path: Path) -> None:
    seed(store)
    for fmt in ("sft", "dpo", "grpo"):
        out = tmp_path / f"{fmt}.jsonl"
        m = export(store, out, format=fmt, holdout=0.25)
        main_tasks = {x["task_id"] for x in lines(out)}
        side = lines(holdout_path_for(out))
        hold_tasks = {x["task_id"] for x in side}
        assert main_tasks and hold_tasks and not main_tasks & hold_tasks
        assert all(in_holdout(t, 0.25) for t in hold_tasks) and not any(in_holdout(t, 0.25) for t in main_tasks)
        assert m.holdout is not None and m.holdout.count == len(side) and m.holdout.tasks == len(hold_tasks)
        again = export(store, tmp_path / f"{fmt}2.jsonl", format=fmt, holdout=0.25)
        assert (again.sha256, again.holdout.sha256) == (m.sha256, m.holdout.sha256)  # type: ignore[union-attr]
    assert 5 <= len(hold_tasks) <= 16  # ~10 of 40 tasks


def test_decontamination_drops_trajectories_sharing_an_ngram(store: Store, tmp_path: Path) -> None:
    rng = random.Random(5)
    ts = [make(i, good=True, rng=rng) for i in range(60)]
    store.add_trajectories(ts, anonymize=False)
    leaked = ts[3].messages[1].content or ""  # a task prompt (14 words): every trajectory of task 3 has it
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"question": leaked.upper(), "answer": "42"}) + "\n\n"
                         + json.dumps({"messages": [{"role": "user", "content": "short text"}]}) + "\n")
    m = export(store, tmp_path / "d.jsonl", decontaminate=eval_file)
    contaminated = {t.id for t in ts if t.messages[1].content == leaked}
    assert len(contaminated) >= 1 and m.dropped == {"contaminated": len(contaminated)}
    assert not contaminated & {x["id"] for x in lines(tmp_path / "d.jsonl")}
    assert m.filters.ngram == 13 and m.filters.decontaminate_sha256
    words = leaked.split()
    hit = {"contaminated": len(contaminated)}

    def dropped(eval_text: str, **kw: Any) -> dict[str, int]:
        eval_file.write_text(json.dumps({"q": eval_text, "other": "an eval record about something else entirely, long enough"}) + "\n")
        return export(store, tmp_path / "e.jsonl", decontaminate=eval_file, **kw).dropped

    assert dropped(" ".join(words[2:12])) == hit  # a short eval text (10 words) counts whole
    assert dropped(" ".join(words[2:9])) == {}  # under 8 words: too short to mean anything
    # Inside a long eval text, 10 shared words are no 13-gram; with --ngram 8 they are.
    long_text = "unrelated words here " * 5 + " ".join(words[2:12]) + " and more unrelated words" * 5
    assert dropped(long_text) == {} and dropped(long_text, ngram=8) == hit


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"format": "csv"}, UnsupportedFormatError, "choose one of sft, dpo, grpo"),
        ({"holdout": 0.0}, ConfigError, "strictly between 0 and 1"),
        ({"holdout": 1.5}, ConfigError, "strictly between 0 and 1"),
        ({"decontaminate": "/nonexistent/eval.jsonl"}, ConfigError, "no such file"),
        ({"balance": "app"}, ConfigError, "choose task"),
        ({"per_group": 5}, ConfigError, "needs balance"),
        ({"since": datetime(2025, 2, 1), "until": datetime(2025, 1, 1)}, ConfigError, "must be before"),
        ({"limit": -1}, ConfigError, "limit"),
        ({"ngram": 0}, ConfigError, "ngram"),
    ],
)
def test_bad_input_raises_and_writes_nothing(db_url: str, tmp_path: Path, kwargs: dict[str, Any], error: type, needle: str) -> None:
    _ingest_small(db_url)
    out = tmp_path / "out" / "x.jsonl"
    with pytest.raises(error, match=needle):
        export(db_url, out, **kwargs)
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_bad_eval_file_is_a_clear_error(db_url: str, tmp_path: Path) -> None:
    _ingest_small(db_url)
    bad = tmp_path / "eval.jsonl"
    bad.write_text('{"q": "fine"}\nnot json\n')
    with pytest.raises(ConfigError, match="line 2 is not JSON"):
        export(db_url, tmp_path / "o" / "x.jsonl", decontaminate=bad)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_cli_export_with_curation_flags(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store)
    store.close()
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"text": sentence(random.Random(0), "sql", 30)}) + "\n")
    runner = CliRunner()
    out = tmp_path / "dpo.jsonl"
    r = runner.invoke(cli_app, ["export", "--format", "dpo", "--out", str(out), "--db", db_url, "--dedup", "--holdout", "0.2",
                                "--decontaminate", str(eval_file), "--balance", "task", "--min-reward", "0", "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    assert m["format"] == "dpo" and m["count"] == len(lines(out)) and m["holdout"]["count"] == len(lines(holdout_path_for(out)))
    assert m["filters"]["dedup"] and m["filters"]["balance"] == "task" and m["filters"]["holdout"] == 0.2
    r = runner.invoke(cli_app, ["export", "--format", "grpo", "--out", str(tmp_path / "g.jsonl"), "--db", db_url,
                                "--task", "math-0", "--model-version", "policy-v1", "--since", "2000-01-01", "--until", "2999-01-01"])
    assert r.exit_code == 0 and "wrote 1 grpo lines" in r.output, r.output


def test_cli_bad_input_exits_2_without_traceback_or_file(db_url: str, tmp_path: Path) -> None:
    _ingest_small(db_url)
    runner = CliRunner()
    x = str(tmp_path / "o" / "x.jsonl")
    for args, needle in [
        (["export", "--format", "kto", "--out", x], "choose one of"),
        (["export", "--since", "yesterday", "--out", x], "ISO"),
        (["export", "--until", "2025-13-45", "--out", x], "ISO"),
        (["export", "--out", str(tmp_path)], "directory"),
        (["export", "--holdout", "1", "--out", x], "between 0 and 1"),
        (["export", "--decontaminate", str(tmp_path / "missing.jsonl"), "--out", x], "no such file"),
        (["export", "--balance", "nope", "--out", x], "choose task"),
    ]:
        r = runner.invoke(cli_app, [*args, "--db", db_url])
        assert r.exit_code == 2, (args, r.output)
        assert needle in " ".join(r.output.split()) and "Traceback" not in r.output
        assert not (tmp_path / "o").exists()


# ---- memory --------------------------------------------------------------------------------------


def _peak(store: Store, path: Path, **kw: Any) -> tuple[int, int]:
    tracemalloc.start()
    try:
        m = export(store, path, batch_size=100, **kw)
        return tracemalloc.get_traced_memory()[1], m.count
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["sft", "grpo"])
@pytest.mark.slow
def test_memory_does_not_grow_with_the_table(tmp_path: Path, fmt: str) -> None:
    """Python-level peak allocation of a curated export at 600 vs 3,000 rows: pages and one task group, not the table."""
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"text": "nothing in the training data looks like this sentence at all, not one bit"}) + "\n")
    peaks = []
    for n in (600, 3000):
        s = open_store(f"sqlite:///{tmp_path / f'{n}.db'}")
        rng = random.Random(n)
        # 15 rollouts per task at both sizes: more tasks, not bigger groups
        s.add_trajectories([make(i, good=rng.random() < 0.5, rng=rng, task=f"task-{i // 15}") for i in range(n)], anonymize=False)
        peak, count = _peak(s, tmp_path / f"{n}.jsonl", format=fmt, dedup=True, decontaminate=eval_file, holdout=0.1)
        s.close()
        assert count > 0
        peaks.append(peak)
    assert peaks[1] < 1.5 * peaks[0], peaks  # 5x the rows, well under 1.5x the memory


# ---- Postgres ----------------------------------------------------------------------------------


def test_postgres_every_format_and_curation(pg_url: str, tmp_path: Path) -> None:
    store = open_store(pg_url)
    try:
        ts = seed(store)
        store.add_feedback(Feedback(trajectory_id=ts[1].id, rating=1.0, correction="fixed answer"))
        report = score(store, retrain=True, clusters=4)
        assert report.auc is not None and report.rows_scored == 240
        for fmt in ("sft", "dpo", "grpo"):
            m = export(store, tmp_path / f"{fmt}.jsonl", format=fmt, dedup=True, holdout=0.2, balance="task", min_score=0.0)
            assert m.count > 0 and m.holdout is not None and m.holdout.count > 0
        m = export(store, tmp_path / "f.jsonl", app="a", model_version="policy-v2", task=ts[1].task_id, min_reward=0.0,
                   balance="cluster", per_group=100)
        assert m.count == sum(1 for t in ts if t.app == "a" and t.served_version == "policy-v2" and t.task_id == ts[1].task_id
                              and t.outcome is not None)
    finally:
        store.close()
