"""GRPO with LoRA on the exact tokens vLLM sampled, off-policy corrected with its behaviour logprobs.

For each group of G episodes on one prompt with rewards r_1..r_G, and each sampled token of episode i:

    A      = (r_i - mean(r)) / (std(r) + 1e-4)                           (B, 1)    same for every token of episode i
    ratio  = exp(log pi_theta(tok) - log pi_behaviour(tok))               (B, T-1)  behaviour = vLLM's logprob
    J_ppo  = min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)   (B, T-1)  PPO's clipped objective
    J      = max(J_ppo, c * A)  where A < 0,  J_ppo elsewhere             (B, T-1)  dual clip, c = `dual_clip` (3)
    L_tok  = -J  [+ beta * KL_k3(pi_theta || pi_base)]                    (B, T-1)
    loss   = sum(L_tok * mask) / sum(mask)                                ()        token mean; mask = sampled tokens

The dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl's `clip_ratio_c`) bounds
the one branch PPO leaves open: for A < 0 the min picks ratio * A once ratio > 1 + eps_high, so a token
the policy now likes far more than the sampler did (a stale episode, a rare token) adds ratio * |A| to the
loss, without bound, with a gradient growing as fast. With the dual clip it adds at most c * |A|, and no
gradient. Per update, `clip_frac` is the fraction of sampled tokens whose objective took the clipped
branch clip(ratio) * A (the min chose it: the token's gradient is zero), and `dual_clip_frac` the fraction
that took c * A; a token whose ratio is out of range but whose min chose ratio * A (PPO's pessimistic side)
is in neither.

Groups whose rewards are all equal have A = 0 everywhere: they are dropped before the forward pass
(counted as `dropped_uniform`), so compute goes only to groups that carry signal. Episodes generated
more than `max_staleness` updates before the policy being trained are dropped (`dropped_stale`); the
rest may lag (the async loop trains step k while step k+1's rollouts are sampled), which the clipped
ratio against the logprobs the sampling server returned makes safe. The policy is the LoRA adapter
that generated the rollouts (`init_adapter`) and keeps training across updates; each update is saved
under a new directory and loaded into vLLM under a new version name (`_online.py`).

Training rows are built by `_tokens.episode_rows` from the ids vLLM returned, never by re-tokenizing.
The ratio assumes the sampling server's logprobs are of the distribution it sampled from (temperature
1, top_p 1, which is how the loop samples); vLLM reports unscaled logprobs otherwise.

Left out, on purpose: a value function (GRPO has none), reward models (rewards come from verifiers and
user feedback), length penalties, sequence packing, multiple GPUs (FSDP comes with the multi-GPU issue),
and a learning-rate schedule (an online learner has no known horizon; the rate is constant); a dual clip
for A > 0 (the min already bounds those tokens at (1 + eps_high) * A).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
from transformers import AutoTokenizer

from . import _defaults as D
from ._lora import ensure_room, lora_model, save_adapter
from ._rollouts import Group, load_grpo_jsonl
from ._tokens import TokenRow, episode_rows, pad_rows, token_logprobs
from .errors import ConfigError, TrainingDataError


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO hyper-parameters; written next to every adapter as `looplift_grpo.json`."""

    rank: int = 8
    """LoRA rank of a new adapter (vLLM accepts 1, 8, 16, 32, 64, ... up to its --max-lora-rank)."""
    alpha: int = 16
    lr: float = 1e-3
    """Measured on the demo task (in-process sweeps): 2e-3 or 4 epochs learn faster at first, then oscillate."""
    epochs: int = 2
    """Passes over one update's rollouts (the clipped ratio keeps later passes near the sampling policy)."""
    minibatch: int = 32
    """Rows per optimizer step."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    """Upper clip (DAPO's clip-higher: lets rare good tokens grow faster than bad ones shrink)."""
    dual_clip: float = D.GRPO_DUAL_CLIP
    """c of the dual clip: a token with a negative advantage adds at most c * |A| to the loss, whatever its
    ratio. Must exceed 1 + clip_high (below, it would cut inside PPO's trust region); 0 turns it off."""
    max_staleness: int = 1
    """Drop episodes sampled more than this many updates before the policy being trained."""
    kl_beta: float = 0.0
    """Weight of the k3 KL estimate to the base model (0: no reference forward pass at all)."""
    require_prefix: bool = False
    """Make a turn that does not extend the previous turn's ids an error instead of its own row."""
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dual_clip and self.dual_clip <= 1 + self.clip_high:
            raise ConfigError(f"GRPOConfig.dual_clip ([grpo] dual_clip) = {self.dual_clip} must exceed 1 + clip_high = "
                              f"{1 + self.clip_high}: set it above that (the default is {D.GRPO_DUAL_CLIP}), or to 0 to "
                              "turn the dual clip off")


@dataclass
class UpdateStats:
    """What one update did; `dropped_*` count rollouts (episodes), not groups."""

    step: int
    groups: int
    rollouts: int
    dropped_uniform: int
    dropped_stale: int
    rows: int = 0
    split_turns: int = 0
    """Rows beyond one per episode: turns whose prompt did not extend the previous turn (trained exactly)."""
    tokens: int = 0
    optimizer_steps: int = 0
    loss: Optional[float] = None
    clip_frac: Optional[float] = None
    """Sampled tokens whose objective took the clipped branch clip(ratio) * A (zero gradient), mean over steps."""
    dual_clip_frac: Optional[float] = None
    """Sampled tokens (A < 0) whose objective took the dual clip's c * A (zero gradient), mean over steps."""
    behaviour_gap: Optional[float] = None
    """Mean |log pi_theta - log pi_behaviour| on the first minibatch: ~0 when the trainer and the server agree."""
    kl: Optional[float] = None
    mean_reward: float = 0.0
    seconds: float = 0.0

    @property
    def trained(self) -> bool:
        return self.optimizer_steps > 0


@dataclass(frozen=True)
class GRPOResult:
    adapter_dir: Path
    stats: UpdateStats
    seconds: float


def advantages(rewards: Sequence[float]) -> list[float]:
    """Group-normalized advantages (r - mean) / (std + 1e-4), population std."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-4) for r in rewards]


@dataclass(frozen=True)
class LossTerms:
    """One minibatch's loss and what it measured (the floats are token means over the mask, detached)."""

    loss: torch.Tensor
    clip_frac: float
    dual_clip_frac: float
    kl: Optional[float]
    gap: float
    """Mean |log pi_theta - log pi_behaviour|."""


def grpo_loss(logp: torch.Tensor, behaviour: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, cfg: GRPOConfig,
              ref: Optional[torch.Tensor] = None) -> LossTerms:
    """The loss of the module docstring. `logp`, `behaviour`, `mask` and `ref` (the base model's logprobs,
    needed when `cfg.kl_beta` > 0) are (B, T-1) and aligned (`token_logprobs`: position t-1 scores token t);
    `adv` is (B, 1)."""
    ratio = torch.exp(logp - behaviour)  # (B, T-1)
    unclipped = ratio * adv  # (B, T-1)
    clipped = torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high) * adv  # (B, T-1)
    j_ppo = torch.minimum(unclipped, clipped)  # (B, T-1)
    if cfg.dual_clip:
        floor = cfg.dual_clip * adv  # (B, 1)
        dual = (adv < 0) & (floor > j_ppo)  # (B, T-1) bool: the dual clip's branch is taken
        j = torch.where(dual, floor.expand_as(j_ppo), j_ppo)  # (B, T-1); = max(j_ppo, c * A) where A < 0
    else:
        dual = torch.zeros_like(j_ppo, dtype=torch.bool)  # (B, T-1)
        j = j_ppo  # (B, T-1)
    per_tok = -j  # (B, T-1)
    denom = mask.sum().clamp(min=1)  # ()
    kl_val = None
    if cfg.kl_beta > 0:
        if ref is None:
            raise ValueError("grpo_loss: kl_beta > 0 needs the reference logprobs `ref`")
        d = ref - logp  # (B, T-1)
        k3 = torch.exp(d) - d - 1  # (B, T-1), >= 0
        per_tok = per_tok + cfg.kl_beta * k3  # (B, T-1)
        kl_val = float((k3.detach() * mask).sum() / denom)
    loss = (per_tok * mask).sum() / denom  # ()
    with torch.no_grad():
        took_clip = (clipped < unclipped).float()  # (B, T-1): the min chose clip(ratio) * A
        return LossTerms(loss=loss, clip_frac=float((took_clip * mask).sum() / denom),
                         dual_clip_frac=float((dual.float() * mask).sum() / denom), kl=kl_val,
                         gap=float(((logp - behaviour).abs() * mask).sum() / denom))


@dataclass
class _Row:
    row: TokenRow
    advantage: float
    ref: Optional[torch.Tensor] = field(default=None)


class GRPOLearner:
    """The policy being trained: a LoRA model and its optimizer, kept across updates."""

    def __init__(self, base_model_dir: Path, config: GRPOConfig = GRPOConfig(), *, init_adapter: Optional[Path] = None,
                 step: int = 0, device: Optional[str] = None, dtype: torch.dtype = torch.float32) -> None:
        torch.manual_seed(config.seed)
        self.config = config
        self.base_model_dir = Path(base_model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
        self.model = lora_model(self.base_model_dir, rank=config.rank, alpha=config.alpha, init_adapter=init_adapter,
                                device=device, dtype=dtype)
        self.device = next(self.model.parameters()).device
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.step = step
        """Policy step of the current weights; rollouts they generate should carry it as `policy_step`."""
        self._rng = random.Random(config.seed)

    def update(self, groups: Sequence[Group], *, on_step: Optional[Callable[[], None]] = None) -> UpdateStats:
        """One policy update on `groups`; the weights move and `step` advances only if some group carried signal.
        `on_step` is called before each optimizer step (the job checks for a stop request there)."""
        t0 = time.monotonic()
        cfg = self.config
        rollouts = sum(len(g.episodes) for g in groups)
        stats = UpdateStats(step=self.step + 1, groups=len(groups), rollouts=rollouts, dropped_uniform=0,
                            dropped_stale=0, mean_reward=statistics.fmean(r for g in groups for r in g.rewards) if groups else 0.0)
        rows: list[_Row] = []
        for g in groups:
            fresh = [e for e in g.episodes if e.policy_step is not None and self.step - e.policy_step <= cfg.max_staleness]
            stats.dropped_stale += len(g.episodes) - len(fresh)
            if len(fresh) < 2 or max(e.reward for e in fresh) - min(e.reward for e in fresh) < 1e-9:
                stats.dropped_uniform += len(fresh)  # no signal: never reaches the forward pass
                continue
            for e, a in zip(fresh, advantages([e.reward for e in fresh])):
                ep_rows = episode_rows(e, require_prefix=cfg.require_prefix)
                stats.split_turns += len(ep_rows) - 1
                rows += [_Row(r, a) for r in ep_rows]
        stats.rows = len(rows)
        stats.tokens = sum(sum(r.row.loss) for r in rows)
        if rows:
            self._train(rows, stats, on_step)
            self.step += 1
        stats.seconds = round(time.monotonic() - t0, 3)
        return stats

    def _train(self, rows: list[_Row], stats: UpdateStats, on_step: Optional[Callable[[], None]]) -> None:
        cfg = self.config
        self.model.train()
        losses, clips, duals, kls = [], [], [], []
        for _ in range(cfg.epochs):
            order = list(range(len(rows)))
            self._rng.shuffle(order)
            for i in range(0, len(order), cfg.minibatch):
                if on_step is not None:
                    on_step()
                mb = [rows[j] for j in order[i:i + cfg.minibatch]]
                terms = self._loss(mb)
                self.opt.zero_grad(set_to_none=True)
                terms.loss.backward()
                torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.opt.step()
                stats.optimizer_steps += 1
                losses.append(terms.loss.item())
                clips.append(terms.clip_frac)
                duals.append(terms.dual_clip_frac)
                if terms.kl is not None:
                    kls.append(terms.kl)
                if stats.behaviour_gap is None:
                    stats.behaviour_gap = terms.gap
        self.model.eval()
        stats.loss = statistics.fmean(losses)
        stats.clip_frac = statistics.fmean(clips)
        stats.dual_clip_frac = statistics.fmean(duals)
        stats.kl = statistics.fmean(kls) if kls else None

    def _loss(self, mb: list[_Row]) -> LossTerms:
        batch = {k: v.to(self.device) for k, v in pad_rows([r.row for r in mb], self.tokenizer.pad_token_id).items()}
        ids, attn = batch["input_ids"], batch["attention_mask"]  # (B, T), (B, T)
        mask = batch["loss_mask"][:, 1:].float()  # (B, T-1): position t-1 scores token t
        beh = batch["behaviour"][:, 1:]  # (B, T-1)
        adv = torch.tensor([r.advantage for r in mb], device=self.device).unsqueeze(1)  # (B, 1)
        logp = token_logprobs(self.model, ids, attn)  # (B, T-1)
        ref = self._ref_logprobs(mb, ids, attn) if self.config.kl_beta > 0 else None  # (B, T-1), no grad
        return grpo_loss(logp, beh, adv, mask, self.config, ref)

    def _ref_logprobs(self, mb: list[_Row], ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        # The base model's logprobs never change: computed once per row, then reused across epochs.
        if any(r.ref is None for r in mb):
            with torch.no_grad(), self.model.disable_adapter():
                ref = token_logprobs(self.model, ids, attn)  # (B, T-1)
            for k, r in enumerate(mb):
                r.ref = ref[k, : len(r.row.ids) - 1]
        out = torch.zeros(ids.shape[0], ids.shape[1] - 1, device=self.device)
        for k, r in enumerate(mb):
            assert r.ref is not None
            out[k, : r.ref.shape[0]] = r.ref
        return out

    def save(self, out_dir: Path, **meta: Any) -> Path:
        """Write the current adapter (a plain peft directory vLLM loads) atomically to `out_dir`."""
        return save_adapter(self.model, Path(out_dir), "grpo",
                            {"config": self.config, "base_model": self.base_model_dir, "step": self.step, **meta})


def train_grpo(
    base_model_dir: Path,
    data: Path,
    out_dir: Path,
    config: GRPOConfig = GRPOConfig(),
    *,
    init_adapter: Optional[Path] = None,
    version_steps: Optional[Mapping[str, int]] = None,
    step: int = 0,
    on_step: Optional[Callable[[], None]] = None,
) -> GRPOResult:
    """One GRPO update on a `collector export --format grpo` file, continuing `init_adapter` (the serving
    policy that sampled the data; None: a new adapter over the base). `version_steps` gives each served
    version's policy step and `step` the step of `init_adapter`, for `max_staleness`; without them every
    episode counts as sampled by `init_adapter` itself."""
    t0 = time.monotonic()
    groups = load_grpo_jsonl(Path(data), version_steps=version_steps)
    if version_steps is None:
        groups = [Group(g.task_id, tuple(replace(e, policy_step=step) for e in g.episodes)) for g in groups]
    learner = GRPOLearner(base_model_dir, config, init_adapter=init_adapter, step=step)
    ensure_room(learner.model, Path(out_dir))
    stats = learner.update(groups, on_step=on_step)
    if not stats.trained:
        raise TrainingDataError(
            f"{data}: nothing to learn from: {stats.dropped_uniform} rollouts are in groups whose rewards are all "
            f"equal and {stats.dropped_stale} are more than max_staleness={config.max_staleness} updates old; "
            "collect more rollouts per task (or harder tasks)")
    out = learner.save(Path(out_dir), data=Path(data), init_adapter=init_adapter, stats=stats)
    return GRPOResult(adapter_dir=out, stats=stats, seconds=round(time.monotonic() - t0, 2))

