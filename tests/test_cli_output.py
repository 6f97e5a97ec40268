"""Output meant for people stays whole when it is not a terminal: `looplift demo`'s final table in a log
(rich cuts a table to 80 columns there) and `sdk.infra.print_table` behind every command's table. No vLLM:
the demo's table is built from made-up cycle figures."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from looplift._cli import _print_demo, demo_table
from sdk.infra import print_table


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich reads these: without them a console not on a terminal is 80 columns wide, as in a plain log."""
    for var in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)


def _result() -> dict[str, Any]:
    gate = {"b": 31, "c": 4, "p_value": 1.2e-6}
    cycles = [
        {"cycle": 0, "version": "base", "held_out_success": 0.34, "episodes": 0, "rollouts_dropped": None,
         "exported": 0, "train_loss": None, "promoted": False, "gate_figures": None, "seconds": 41.0},
        {"cycle": 1, "version": "looplift-tiny-v1", "held_out_success": 0.71, "episodes": 1024,
         "rollouts_dropped": 377, "exported": 647, "train_loss": 0.4321, "promoted": True, "gate_figures": gate,
         "seconds": 612.4},
        {"cycle": 2, "version": "looplift-tiny-v2", "held_out_success": 0.9, "episodes": 1024, "rollouts_dropped": 12,
         "exported": 1012, "train_loss": 0.1234, "promoted": False, "gate_figures": {"b": 3, "c": 2, "p_value": 0.5},
         "seconds": 598.0},
    ]
    return {"cycles": cycles, "swap_failed_requests": 0, "swap_requests": 120, "json_out": "bench/results/demo.json",
            "chart": "bench/results/demo.png", "total_seconds": 1251.4}


#: What each row of `_result()` must show whole, headers included.
CELLS = ["cycle", "version", "held-out success", "episodes", "dropped", "exported", "train loss", "promoted",
         "gate b/c, p", "seconds", "held-out success per cycle",
         "base", "34%", "41", "looplift-tiny-v1", "71%", "1024", "377", "647", "0.432", "yes", "31/4, p=1.2e-06", "612",
         "looplift-tiny-v2", "90%", "12", "1012", "0.123", "no", "3/2, p=0.5", "598"]


def _rows(text: str) -> list[list[str]]:
    """The table's lines, split into cells at rich's vertical borders."""
    return [[c.strip() for c in line.replace("┃", "│").split("│")] for line in text.splitlines()]


def _assert_whole(text: str) -> None:
    assert "…" not in text, text
    cells = {c for row in _rows(text) for c in row} | {line.strip() for line in text.splitlines()}
    missing = [c for c in CELLS if c not in cells]
    assert not missing, f"cut or wrapped: {missing}\n{text}"


def test_demo_table_is_whole_when_not_a_terminal() -> None:
    out = io.StringIO()  # not a TTY: rich gives it 80 columns
    con = Console(file=out)
    assert not con.is_terminal and con.width == 80
    print_table(con, demo_table(_result()))
    _assert_whole(out.getvalue())
    assert max(map(len, out.getvalue().splitlines())) > 80  # the table needs more than rich's default
    assert con.width == 80  # the console is left as it was


def test_plain_rich_would_cut_it() -> None:
    """The case `print_table` exists for: the same table through `Console.print` at 80 columns."""
    out = io.StringIO()
    Console(file=out).print(demo_table(_result()))
    with pytest.raises(AssertionError):
        _assert_whole(out.getvalue())


def test_print_demo_to_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    """`looplift demo`'s own printing, with stdout captured (not a terminal), as in `looplift demo > log`."""
    _print_demo(_result())
    captured = capsys.readouterr()
    _assert_whole(captured.out)
    assert "failed requests during swaps: 0 of 120" in captured.err


def test_on_a_terminal_the_table_fits_the_window() -> None:
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    con = Console(file=out, width=60, force_terminal=True, color_system=None)
    print_table(con, demo_table(_result()))
    assert max(map(len, out.getvalue().splitlines())) <= 60


def test_a_narrow_table_is_printed_as_it_is() -> None:
    from rich.table import Table

    table = Table("a", "b")
    table.add_row("1", "2")
    out = io.StringIO()
    print_table(Console(file=out), table)
    assert out.getvalue().splitlines()[1].strip() == "┃ a ┃ b ┃"


# ---- third-party progress bars (trainer/_quiet.py) --------------------------------------------------
BARS = ("Loading weights", "Writing model shards", "%|")
# Turning transformers' bars on and off also tells huggingface_hub, which warns that its variable has priority.
_HUB_WARNS = pytest.mark.filterwarnings("ignore:Cannot (en|dis)able progress bars:UserWarning")


def _round_trip(root: Any) -> None:
    """Save a tiny random Llama as the base model builder does, load it as training does (`lora_model`),
    save the adapter (`save_adapter`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer._lora import lora_model, save_adapter

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32)
    LlamaForCausalLM(cfg).save_pretrained(root / "base")
    save_adapter(lora_model(root / "base", rank=2, alpha=4), root / "adapter", "test", {})


@_HUB_WARNS
def test_no_third_party_progress_bars(tmp_path: Any, capfd: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' bars, turned on after it was imported, are off again once the trainer quiets them (as
    `import trainer` does), and a model save + load + adapter save draws none on stderr."""
    import trainer  # noqa: F401  (its import calls quiet_progress_bars)
    from transformers.utils import logging

    from trainer._quiet import ENV, quiet_progress_bars

    monkeypatch.setenv(ENV, "1")
    logging.enable_progress_bar()
    _round_trip(tmp_path / "with-bars")
    assert any(b in capfd.readouterr().err for b in BARS)  # the bars this test looks for, as they look
    quiet_progress_bars()
    assert not logging.is_progress_bar_enabled()
    _round_trip(tmp_path / "quiet")
    err = capfd.readouterr().err
    assert not [b for b in BARS if b in err], err


@_HUB_WARNS
def test_progress_bars_stay_on_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_DISABLE_PROGRESS_BARS=0 (a user who wants them) is left alone."""
    from transformers.utils import logging

    from trainer._quiet import ENV, quiet_progress_bars

    monkeypatch.setenv(ENV, "0")
    logging.enable_progress_bar()
    try:
        quiet_progress_bars()
        assert logging.is_progress_bar_enabled()
    finally:
        logging.disable_progress_bar()


def test_an_interrupted_demo_shows_only_its_own_unfinished_cycles(tmp_path: Any) -> None:
    """`read_partial` (what `looplift demo` prints when a signal stops it) returns the cycles this run wrote. Catches:
    a file left by an earlier run (older than the start) shown as this run's, a finished result taken for a partial
    one, a partial with no cycle shown, a half-written file raising."""
    import json
    import os
    import time

    from looplift._demo import read_partial

    out = tmp_path / "demo.json"
    started = time.time()
    assert read_partial(out, started) is None  # nothing written
    out.write_text(json.dumps({**_result(), "finished": False}))
    assert read_partial(out, started) == {**_result(), "finished": False}
    os.utime(out, (started - 60, started - 60))
    assert read_partial(out, started) is None  # an earlier run's file
    for body in (json.dumps({**_result(), "finished": True}), json.dumps({**_result(), "cycles": [], "finished": False}),
                 '{"cycles": [', json.dumps([1, 2])):
        out.write_text(body)
        assert read_partial(out, started) is None, body
