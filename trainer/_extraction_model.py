"""The extraction family's base model: a small model of a real family (`_families`: its tokenizer, chat template and
tool-call format) trained on extraction episodes of one level (`looplift model build --env extraction`).

The episodes are the family's own: `envs._extraction.careless` (the oracle through the tools, `read_page`,
`get_table`, `submit_answer`, with one careless reader's mistake in one field on a share `wrong` of the tasks: a
figure copied as printed from a table in millions, the other year's figure, two fields swapped) run on training
reports of the level (`sdk.run`, no model: the same environment, prompt and tools a served model gets), cut after
the first submission and rendered by the family's template with the family's tools, as vLLM renders a request.
The model learns the tool calls and how the answer is made, imperfectly: it must start at or below 40% held-out
success at level 1 (issue 32) so that training on its own verified work has something to fix.

Cached by a hash of everything that determines it (`ExtractionModelConfig`, the source of the extraction family and
of this builder, the torch/transformers/tokenizers versions): `$LOOPLIFT_HOME/models/extraction-<family>-l<level>-
<hash>`, written whole or not at all (`atomic_dir`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sdk import looplift_home
from sdk.infra import record_cost

from ._data import Progress, encode_chat, train_on_active_vocab
from ._families import _new_model, _one_thread, _write, check_out_dir, family_tokenizer, model_family, model_size
from .errors import ConfigError

#: Tokens a demonstration may have: a level-1 episode is ~1,900-2,100 with the qwen tokenizer (tools, prompt, the page,
#: the table, the answer); one that does not fit is left out, never cut (a cut one would teach a call without its end).
MAX_EXTRACTION_LEN = 3072


@dataclass(frozen=True)
class ExtractionModelConfig:
    """What an extraction base model is built from; every field is part of its cache key."""

    family: str = "qwen"
    level: int = 1
    size: str = "tiny"
    steps: int = 600
    """AdamW steps."""
    episodes: int = 800
    """Distinct training reports the demonstrations come from (each is seen steps * batch_size / episodes times)."""
    wrong: float = 0.5
    """Share of the demonstrations whose answer carries a careless reader's mistake (`envs._extraction.careless`)."""
    seed: int = 0
    batch_size: int = 8
    lr: float = 3e-3

    def check(self, out_dir: Optional[Path] = None, force: bool = False) -> None:
        """A `ConfigError` naming the field to change, before anything is built; with `out_dir`, also one when it
        holds files and `force` is not set."""
        model_family(self.family)
        model_size(self.size)
        if self.level not in (1, 2, 3):
            raise ConfigError(f"the extraction level must be 1, 2 or 3, not {self.level}")
        if self.steps < 1 or self.episodes < 1 or self.batch_size < 1:
            raise ConfigError(f"steps, episodes and batch size must be 1 or more (got {self.steps}, {self.episodes}, "
                              f"{self.batch_size})")
        if not 0.0 <= self.wrong <= 1.0:
            raise ConfigError(f"the share of wrong demonstrations must be within 0..1, not {self.wrong}")
        if out_dir is not None:
            check_out_dir(out_dir, force)

    def key(self) -> str:
        """A hash of the config, the source that turns it into weights, and the libraries that run it."""
        import tokenizers
        import torch
        import transformers

        from envs import family_sources

        from . import _data, _families

        h = hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode())
        sources = family_sources("extraction") + [Path(__file__), Path(_data.__file__), Path(_families.__file__)]
        for src in sources:
            h.update(src.name.encode() + b"\0" + src.read_bytes())
        h.update(f"{torch.__version__} {transformers.__version__} {tokenizers.__version__}".encode())
        return h.hexdigest()[:12]


def extraction_model_dir(cfg: ExtractionModelConfig) -> Path:
    """Where the model for `cfg` is (or will be) cached."""
    return looplift_home() / "models" / f"extraction-{cfg.family}-l{cfg.level}-{cfg.key()}"


def extraction_demonstrations(cfg: ExtractionModelConfig) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The family's tools and `cfg.episodes` demonstrations (OpenAI chat messages, system prompt first, cut after the
    first `submit_answer` call), from `careless` episodes on training reports of `cfg.level`."""
    import sdk
    from envs import careless_extraction, extraction_family

    fam = extraction_family(cfg.level)
    tasks = fam.tasks("train", cfg.episodes, cfg.seed)
    trajs = sdk.run(tasks, fam.env_factory, verifier=fam.verifier, budget=fam.budget,
                    policy=careless_extraction(cfg.wrong, cfg.seed), system_prompt=fam.system_prompt, concurrency=2)
    convs, tools = [], list(trajs[0].metadata.get("tools") or []) if trajs else []
    for t in trajs:
        msgs: list[dict[str, Any]] = []
        for m in t.messages:
            msgs.append(m.model_dump(exclude_none=True))
            if m.role == "assistant" and any(c.function.name == "submit_answer" for c in m.tool_calls or []):
                break
        else:
            raise RuntimeError(f"{t.task_id}: the careless oracle never submitted ({t.end_reason}); a family bug")
        convs.append(msgs)
    return tools, convs


def build_extraction_model(cfg: ExtractionModelConfig = ExtractionModelConfig(), *, out_dir: Optional[Path] = None,
                           force: bool = False, progress: Optional[Progress] = None,
                           say: Any = None) -> Path:
    """Build (or reuse the cached) extraction base model for `cfg`; returns its HF directory (served as it is:
    `looplift up --model DIR`). `say(text)` hears each phase. An `out_dir` that holds anything but this build is a
    `ConfigError` without `force`, as for `build_family_model`."""
    cfg.check()
    out = Path(out_dir) if out_dir is not None else extraction_model_dir(cfg)
    if (out / "looplift.json").is_file() and not force:
        return out
    if out_dir is not None:
        check_out_dir(out, force)
    tell = say or (lambda _text: None)
    t0 = time.monotonic()
    fam, shape = model_family(cfg.family), model_size(cfg.size)
    tok = family_tokenizer(cfg.family)
    tell(f"running {cfg.episodes} level-{cfg.level} extraction episodes for demonstrations ...")
    tools, convs = extraction_demonstrations(cfg)
    tell("rendering them in the family's chat and tool-call format ...")
    examples = []
    for msgs in convs:
        ids, labels = encode_chat(tok, msgs, tools=tools, max_len=10**9)
        if len(ids) <= MAX_EXTRACTION_LEN:
            examples.append((ids, labels))
    if len(examples) < len(convs) // 2:
        raise RuntimeError(f"only {len(examples)} of {len(convs)} demonstrations fit {MAX_EXTRACTION_LEN} tokens")
    model = _new_model(fam, shape, tok, cfg.seed)
    tell(f"training {cfg.steps} steps on {len(examples)} demonstrations ...")
    with _one_thread():
        loss = train_on_active_vocab(model, examples, pad_id=tok.pad_token_id, steps=cfg.steps,
                                     batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, progress=progress)
    lengths = sorted(len(ids) for ids, _ in examples)
    meta = {"family": fam.name, "size": cfg.size, "shape": dataclasses.asdict(shape), "tool_parser": fam.tool_parser,
            "tokenizer_mode": fam.tokenizer_mode, "architecture": fam.architecture, "vocab_size": len(tok),
            "env": "extraction", "config": dataclasses.asdict(cfg), "key": cfg.key(), "final_loss": loss,
            "demonstrations": len(examples), "left_out_too_long": len(convs) - len(examples),
            "tokens_p50": lengths[len(lengths) // 2], "tokens_max": lengths[-1],
            "parameters": sum(p.numel() for p in model.parameters()), "seconds": round(time.monotonic() - t0, 1)}
    _write(model, tok, fam, out, meta)
    record_cost("model_build", f"extraction-{fam.name}-l{cfg.level} ({cfg.steps} steps)", time.monotonic() - t0)
    return out
