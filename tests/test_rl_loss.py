"""The GRPO and DPO losses, each property pinned by a test that kills a named broken variant ("mutant").

The first part computes the GRPO loss by hand on a few tokens (`grpo_loss`): no model. The second runs the
learners on a tiny causal LM built here (one Llama layer, hidden 64, a 32-word vocabulary with a chat
template; random weights, seed 0): the loss mask's alignment, that one update moves a token's probability the
way its advantage says, DPO's margin, its reference, and its refusal to truncate. Seconds on a CPU.

    mutant (applied one at a time to a scratch copy)     killed by (among others)
    sign flipped (+min(r·A, clip(r)·A))                  test_loss_value_by_hand__kills_sign_flip, the direction tests
    KL term left out of the loss                         test_kl_term_is_in_the_loss__kills_missing_kl
    clamp only (-clip(r)·A, no min)                      test_min_of_both_branches__kills_clamp_only
    advantages not centred (mean not subtracted)         test_advantages_are_centred__kills_uncentred
    advantages centred on the batch, not the group       test_each_group_is_centred_on_its_own_mean__kills_batch_mean
    mask off by one: loss_mask[:, :-1], behaviour[:, :-1], prompt or padding in the mask, the last sampled token
      dropped by `episode_rows`                          test_loss_covers_exactly_the_sampled_tokens__kills_mask_off_by_one
    no dual clip; the dual clip on a positive advantage  test_dual_clip_bounds_a_negative_advantage__kills_missing_dual_clip
    KL of log ref + log pi, or over unmasked positions   test_kl_term_is_in_the_loss__kills_missing_kl
    clip_frac counting the wrong branch (ratio out of range; unclipped branch won)
                                                         test_clip_frac_counts_the_clipped_branch__kills_wrong_branch
    DPO sign flipped                                     test_one_dpo_step_raises_the_chosen_replys_margin,
                                                         test_dpo_loss_by_hand__kills_sign_flip_and_unscaled_nll
    DPO margin without the reference, beta left out, the NLL summed (not per token) or weighted wrongly, a zero
      token count clamped to anything but 1
                                                         test_dpo_loss_by_hand__kills_sign_flip_and_unscaled_nll
    DPO base as reference while continuing an adapter    test_dpo_starts_at_its_reference__kills_wrong_reference
    DPO truncating instead of refusing a long pair       test_a_dpo_pair_too_long_for_max_len_is_an_error_naming_it
    the DPO job step not continuing the serving adapter  test_the_dpo_step_continues_the_serving_adapter
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
import torch

from trainer import ConfigError, Episode, GRPOConfig, GRPOLearner, Group, TrainingDataError, Turn, UpdateStats
from trainer._tokens import episode_rows, token_logprobs
from trainer.dpo import DPOConfig, dpo_loss, train_dpo
from trainer.grpo import LossTerms, _Row, advantages, grpo_loss

CFG = GRPOConfig(clip_low=0.2, clip_high=0.28, dual_clip=3.0)

# ---- the GRPO loss by hand ----------------------------------------------------------------------


def _loss(rows: list[list[Optional[float]]], advs: list[float], cfg: GRPOConfig = CFG,
          ref_minus_logp: float = 0.0) -> tuple[LossTerms, torch.Tensor]:
    """`grpo_loss` on rows of per-token ratios, one advantage per row; None marks a masked position (prompt or
    padding) whose made-up ratio 7 must not count. Returns the terms and d loss / d logp, (B, T)."""
    width = max(len(r) for r in rows)
    rows = [r + [None] * (width - len(r)) for r in rows]
    ratio = torch.tensor([[7.0 if x is None else x for x in r] for r in rows])  # (B, T)
    mask = torch.tensor([[0.0 if x is None else 1.0 for x in r] for r in rows])  # (B, T)
    logp = torch.log(ratio).requires_grad_()  # (B, T): behaviour 0, so exp(logp - behaviour) = ratio
    ref = (logp + ref_minus_logp).detach()  # (B, T)
    terms = grpo_loss(logp, torch.zeros_like(ratio), torch.tensor(advs).unsqueeze(1), mask, cfg, ref)
    terms.loss.backward()
    assert logp.grad is not None
    return terms, logp.grad


def test_loss_value_by_hand__kills_sign_flip() -> None:
    """Mutant: `per_tok = +min(r·A, clip(r)·A)` (gradient ascent on the loss: bad tokens are reinforced)."""
    # Row 0 (A = +2): ratios 1.0, 1.1, then a masked position. Row 1 (A = -1): ratio 0.9.
    terms, grad = _loss([[1.0, 1.1, None], [0.9, None, None]], [2.0, -1.0])
    # min(1.0·2, 1.0·2) = 2; min(1.1·2, 1.1·2) = 2.2; min(0.9·-1, 0.9·-1) = -0.9. L = -J, mean over 3 tokens.
    assert terms.loss.item() == pytest.approx((-2.0 - 2.2 + 0.9) / 3, abs=1e-6)
    # d(-r·A)/d logp = -r·A / 3 per token (r = exp(logp)): a positive advantage pushes logp up (negative gradient).
    assert grad.flatten().tolist() == pytest.approx([-2.0 / 3, -2.2 / 3, 0.0, 0.9 / 3, 0.0, 0.0], abs=1e-6)


def test_dpo_loss_by_hand__kills_sign_flip_and_unscaled_nll() -> None:
    """Mutants: the margin's sign flipped, either reference term left out, beta not applied, the chosen NLL
    summed over its tokens instead of averaged, nll_weight ignored, a sum over pairs instead of the mean."""
    t = torch.tensor
    pol_c, pol_r, ref_c, ref_r = t([-4.0, -9.0]), t([-6.0, -5.0]), t([-5.0, -8.0]), t([-5.5, -7.0])
    n_c = t([2, 3])
    cfg = DPOConfig(beta=0.5, nll_weight=0.25)
    # margins: (-4+5) - (-6+5.5) = 1.5 and (-9+8) - (-5+7) = -3; NLLs: 4/2 = 2 and 9/3 = 3.
    want = [-math.log(1 / (1 + math.exp(-0.5 * m))) + 0.25 * nll for m, nll in ((1.5, 2.0), (-3.0, 3.0))]
    assert dpo_loss(pol_c, pol_r, ref_c, ref_r, n_c, cfg).item() == pytest.approx(sum(want) / 2, abs=1e-6)
    # A zero token count is clamped to one (the NLL is then the sum, 4), not a division by zero or by two.
    want[0] += 0.25 * (4.0 - 2.0)
    assert dpo_loss(pol_c, pol_r, ref_c, ref_r, t([0, 3]), cfg).item() == pytest.approx(sum(want) / 2, abs=1e-6)


def test_kl_term_is_in_the_loss__kills_missing_kl() -> None:
    """Mutant: the k3 estimate is measured (`kl`) but not added to the loss."""
    cfg = GRPOConfig(kl_beta=0.5)
    terms, _ = _loss([[1.0, 1.0]], [1.0], cfg, ref_minus_logp=0.5)
    k3 = math.exp(0.5) - 0.5 - 1  # d = log ref - log pi = 0.5 on both tokens
    assert terms.kl == pytest.approx(k3, abs=1e-6)
    assert terms.loss.item() == pytest.approx(-1.0 + 0.5 * k3, abs=1e-6)
    # log pi != 0 and a masked position: the estimate is of log ref - log pi (not +), over the mask only.
    off_one, _ = _loss([[1.1, 0.9, None]], [1.0], cfg, ref_minus_logp=0.5)
    assert off_one.kl == pytest.approx(k3, abs=1e-6)
    assert off_one.loss.item() == pytest.approx((-1.1 - 0.9) / 2 + 0.5 * k3, abs=1e-6)
    no_kl, _ = _loss([[1.0, 1.0]], [1.0], GRPOConfig(kl_beta=0.0), ref_minus_logp=0.5)
    assert no_kl.kl is None and no_kl.loss.item() == pytest.approx(-1.0, abs=1e-6)


def test_min_of_both_branches__kills_clamp_only() -> None:
    """Mutant: `per_tok = -clip(r)·A` (no min): PPO's pessimistic side is lost — a token the policy already
    made less likely (r = 0.5, A > 0) or more likely (r = 1.5, A < 0) than the sampler stops being corrected."""
    terms, grad = _loss([[0.5], [1.5]], [1.0, -1.0])
    # r = 0.5, A = +1: min(0.5, 0.8) = 0.5 (unclipped). r = 1.5, A = -1: min(-1.5, -1.28) = -1.5 (unclipped;
    # above the dual clip's -3). Clamp only would give -0.8 and +1.28.
    assert terms.loss.item() == pytest.approx((-0.5 + 1.5) / 2, abs=1e-6)
    assert grad.flatten().tolist() == pytest.approx([-0.5 / 2, 1.5 / 2], abs=1e-6)  # unclipped: -r·A / 2
    assert terms.clip_frac == 0.0 and terms.dual_clip_frac == 0.0


def test_clipped_branch_has_no_gradient() -> None:
    terms, grad = _loss([[1.5], [0.5]], [1.0, -1.0])
    # r = 1.5, A = +1: min(1.5, 1.28) = 1.28. r = 0.5, A = -1: min(-0.5, -0.8) = -0.8. Both constants.
    assert terms.loss.item() == pytest.approx((-1.28 + 0.8) / 2, abs=1e-6)
    assert grad.abs().max().item() == 0.0 and terms.clip_frac == 1.0


def test_dual_clip_bounds_a_negative_advantage__kills_missing_dual_clip() -> None:
    """Mutant: no dual clip. A = -1 at ratio 10 adds -min(-10, -1.28) = 10 to the loss, with gradient 10 —
    unbounded in the ratio; with c = 3 it adds 3 and no gradient."""
    terms, grad = _loss([[10.0], [2.0]], [-1.0, -1.0])
    # r = 10: max(min(-10, -1.28), -3) = -3 (dual). r = 2: max(min(-2, -1.28), -3) = -2 (unclipped, gradient 2/2).
    assert terms.loss.item() == pytest.approx((3.0 + 2.0) / 2, abs=1e-6)
    assert grad.flatten().tolist() == pytest.approx([0.0, 2.0 / 2], abs=1e-6)
    assert terms.dual_clip_frac == 0.5 and terms.clip_frac == 0.0
    big, big_grad = _loss([[1e6]], [-2.0])
    assert big.loss.item() == pytest.approx(6.0) and big_grad.item() == 0.0  # c·|A|, whatever the ratio
    # A positive advantage is bounded by the min already: the dual clip leaves it alone.
    pos, _ = _loss([[10.0]], [1.0])
    assert pos.loss.item() == pytest.approx(-1.28) and pos.dual_clip_frac == 0.0
    small, _ = _loss([[10.0]], [0.5])  # 0 < A < 1: c·A = 1.5 is above min(5, 0.64), and still not taken
    assert small.loss.item() == pytest.approx(-0.64) and small.dual_clip_frac == 0.0
    off, off_grad = _loss([[10.0]], [-1.0], GRPOConfig(dual_clip=0))
    assert off.loss.item() == pytest.approx(10.0) and off_grad.item() == pytest.approx(10.0)  # 0 turns it off


def test_a_dual_clip_inside_the_trust_region_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"dual_clip\) = 1.2 must exceed 1 \+ clip_high = 1.28.*or to 0"):
        GRPOConfig(dual_clip=1.2)


def test_clip_frac_counts_the_clipped_branch__kills_wrong_branch() -> None:
    """Mutants: counting tokens whose ratio is outside [1 - eps_low, 1 + eps_high] (5/7 here), or those where
    the unclipped branch won (2/7), instead of those whose objective took clip(r)·A (3/7)."""
    terms, _ = _loss([[1.5, 2.0, 0.5, 1.0], [0.5, 10.0, 1.1]], [1.0, -1.0])
    # A = +1: 1.5 -> clipped, 2.0 -> clipped, 0.5 -> unclipped (pessimistic side), 1.0 -> in range.
    # A = -1: 0.5 -> clipped, 10 -> dual clip, 1.1 -> in range.
    assert terms.clip_frac == pytest.approx(3 / 7) and terms.dual_clip_frac == pytest.approx(1 / 7)


def test_advantages_are_centred__kills_uncentred() -> None:
    """Mutant: `r / (std + 1e-4)` (the group mean not subtracted): every episode of an all-positive group is
    reinforced."""
    std = math.sqrt(2 / 3)
    assert advantages([3.0, 1.0, 2.0]) == pytest.approx([1 / (std + 1e-4), -1 / (std + 1e-4), 0.0], abs=1e-9)


# ---- a tiny causal LM ---------------------------------------------------------------------------

WORDS = ["<pad>", "<unk>", "<user>", "<assistant>", "<end>", "."] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
TEMPLATE = ("{% for m in messages %}{{ '<' + m['role'] + '> ' + m['content'] + ' <end> ' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<assistant> ' }}{% endif %}")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Llama layer, hidden 64, a 32-word whitespace vocabulary with a chat template; random init, seed 0."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny_lm")
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", eos_token="<end>")
    tok.chat_template = TEMPLATE
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(WORDS), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                      pad_token_id=0, eos_token_id=4, bos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def _ids(text: str) -> list[int]:
    return [WORDS.index(w) for w in text.split()]


PROMPT = _ids("<user> a b c <end> <assistant>")


def _logp(model: Any, prompt: list[int], comp: list[int]) -> list[float]:
    """log p of each completion token after `prompt`, alone in its batch (no padding)."""
    ids = torch.tensor([prompt + comp])
    with torch.no_grad():
        return token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) - 1:].tolist()


def _learner(tiny_lm: Path, **kw: Any) -> GRPOLearner:
    return GRPOLearner(tiny_lm, GRPOConfig(**{"epochs": 1, "minibatch": 8, **kw}))


def _episode(name: str, reward: float, prompt: list[int], comp: list[int], beh: list[float]) -> Episode:
    return Episode(name, reward, (Turn(tuple(prompt), tuple(comp), tuple(beh)),), policy_step=0)


def test_loss_covers_exactly_the_sampled_tokens__kills_mask_off_by_one(tiny_lm: Path) -> None:
    """Mutants: `loss_mask[:, :-1]` / `behaviour[:, :-1]` (the prompt's last token counted, the last sampled
    token dropped), padding or prompt positions in the mask, `episode_rows` marking one token too few. The
    loss of a padded minibatch must equal the mean, over exactly the sampled tokens, of -J computed from each
    row alone."""
    learner = _learner(tiny_lm)
    shifts = [[0.1, -0.15, 0.05], [-0.2, 0.12]]  # behaviour = policy logp + shift: ratios exp(-shift), all distinct
    comps = [_ids("d e <end>"), _ids("f <end>")]
    prompts = [PROMPT, _ids("<user> a <end> <assistant>")]  # different lengths: the second row is padded
    eps, expected = [], []
    for k, (prompt, comp, shift, adv) in enumerate(zip(prompts, comps, shifts, [1.0, -1.0])):
        lp = _logp(learner.model, prompt, comp)
        eps.append(_episode(f"m{k}", 0.0, prompt, comp, [x + s for x, s in zip(lp, shift)]))
        for s in shift:
            r = math.exp(-s)
            expected.append(-min(r * adv, min(max(r, 0.8), 1.28) * adv))
    rows = [_Row(episode_rows(e)[0], adv) for e, adv in zip(eps, [1.0, -1.0])]
    assert [sum(r.row.loss) for r in rows] == [3, 2]
    terms = learner._loss(rows)
    assert terms.loss.item() == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    assert terms.gap == pytest.approx(sum(abs(s) for sh in shifts for s in sh) / 5, abs=1e-5)


def _update_with(learner: GRPOLearner, ep: Episode, adv: float) -> None:
    """One optimizer step on one episode with advantage `adv` (the learner's own training step)."""
    stats = UpdateStats(step=1, groups=1, rollouts=1, dropped_uniform=0, dropped_stale=0)
    learner._train([_Row(r, adv) for r in episode_rows(ep)], stats, None)
    assert stats.optimizer_steps == 1


@pytest.mark.parametrize("adv", [1.0, -1.0])
def test_one_update_moves_a_tokens_probability_the_way_its_advantage_says(tiny_lm: Path, adv: float) -> None:
    """Kills the sign flip on a real model (LoRA, AdamW, the learner's step): with A > 0 the sampled token's
    probability under the same prompt rises, with A < 0 it falls."""
    learner = _learner(tiny_lm)
    comp = _ids("q")
    (before,) = _logp(learner.model, PROMPT, comp)
    _update_with(learner, _episode("d", 0.0, PROMPT, comp, [before]), adv)
    (after,) = _logp(learner.model, PROMPT, comp)
    assert (after - before) * adv > 1e-4, (before, after)


def test_an_update_moves_probability_from_the_worse_to_the_better_completion(tiny_lm: Path) -> None:
    """Through `update` (group advantages): the better completion gains on the worse one."""
    learner = _learner(tiny_lm)
    good, bad = _ids("x"), _ids("y")
    before = _logp(learner.model, PROMPT, good)[0] - _logp(learner.model, PROMPT, bad)[0]
    group = Group("t", (_episode("good", 1.0, PROMPT, good, _logp(learner.model, PROMPT, good)),
                        _episode("bad", 0.0, PROMPT, bad, _logp(learner.model, PROMPT, bad))))
    assert learner.update([group]).trained
    after = _logp(learner.model, PROMPT, good)[0] - _logp(learner.model, PROMPT, bad)[0]
    assert after > before + 1e-4, (before, after)


def test_each_group_is_centred_on_its_own_mean__kills_batch_mean(tiny_lm: Path, monkeypatch: Any) -> None:
    """Mutant: advantages normalized over the whole update instead of per group (a group of easy tasks, all
    rewarded 0.9-1.0, would be reinforced wholesale against a hard group's 0.0-0.1)."""
    learner = _learner(tiny_lm)
    seen: list[float] = []
    monkeypatch.setattr(learner, "_train", lambda rows, stats, on_step: seen.extend(r.advantage for r in rows))
    comp = _ids("x")
    lp = _logp(learner.model, PROMPT, comp)
    easy = Group("easy", (_episode("e0", 1.0, PROMPT, comp, lp), _episode("e1", 0.9, PROMPT, comp, lp)))
    hard = Group("hard", (_episode("h0", 0.1, PROMPT, comp, lp), _episode("h1", 0.0, PROMPT, comp, lp)))
    learner.update([easy, hard])
    a = 0.05 / (0.05 + 1e-4)  # each group: rewards mean +- 0.05, population std 0.05
    assert seen == pytest.approx([a, -a, a, -a], abs=1e-6)


# ---- DPO ----------------------------------------------------------------------------------------


def _pairs(path: Path, pairs: list[tuple[str, str, str]], **extra: Any) -> Path:
    with open(path, "w") as f:
        for i, (prompt, chosen, rejected) in enumerate(pairs):
            f.write(json.dumps({"prompt": [{"role": "user", "content": prompt}],
                                "chosen": [{"role": "assistant", "content": chosen}],
                                "rejected": [{"role": "assistant", "content": rejected}],
                                "chosen_id": f"traj-c{i}", "rejected_id": f"traj-r{i}", **extra}) + "\n")
    return path


def _margin(model_dir: Path, adapter: Optional[Path], prompt: str, chosen: str, rejected: str) -> float:
    """log p(chosen) - log p(rejected) of the replies' tokens under the base model or base + `adapter`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    p = _ids(f"<user> {prompt} <end> <assistant>")
    return sum(_logp(model, p, _ids(f"{chosen} <end>"))) - sum(_logp(model, p, _ids(f"{rejected} <end>")))


def test_one_dpo_step_raises_the_chosen_replys_margin(tiny_lm: Path, tmp_path: Path) -> None:
    """Kills a sign-flipped DPO loss: after one step, log p(chosen) - log p(rejected) is above the base's."""
    pair = ("a b", "c d", "e f")
    data = _pairs(tmp_path / "p.jsonl", [pair])
    res = train_dpo(tiny_lm, data, tmp_path / "out", DPOConfig(steps=1, batch_size=1, nll_weight=0.0))
    assert res.pairs == 1 and res.accuracy == 1.0
    assert _margin(tiny_lm, res.adapter_dir, *pair) > _margin(tiny_lm, None, *pair) + 1e-4


def test_dpo_starts_at_its_reference__kills_wrong_reference(tiny_lm: Path, tmp_path: Path) -> None:
    """Continuing the serving adapter, the reference is that adapter (the policy that produced the pairs):
    the first step's margin is 0 and its loss exactly log 2. Mutant: the base as reference while continuing
    an adapter (the first loss is then -log sigmoid(beta * the adapter's own margin))."""
    from trainer._base_model import write_lora_adapter

    serving = write_lora_adapter(tiny_lm, tmp_path / "serving", seed=3, rank=4)
    pair = ("a b", "c d", "e f")
    assert abs(_margin(tiny_lm, serving, *pair) - _margin(tiny_lm, None, *pair)) > 0.1  # the adapter matters
    data = _pairs(tmp_path / "p.jsonl", [pair])
    losses: list[float] = []
    cfg = DPOConfig(steps=2, batch_size=1, nll_weight=0.0, beta=1.0)
    res = train_dpo(tiny_lm, data, tmp_path / "out", cfg, init_adapter=serving,
                    progress=lambda s, n, loss: losses.append(loss))
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5) and res.accuracy == 1.0
    assert _margin(tiny_lm, res.adapter_dir, *pair) > _margin(tiny_lm, serving, *pair) + 1e-4
    saved = json.loads((res.adapter_dir / "adapter_config.json").read_text())
    meta = json.loads((res.adapter_dir / "looplift_dpo.json").read_text())
    assert saved["r"] == 4 and meta["init_adapter"] == str(serving) and meta["reference"] == "init_adapter"
    fresh: list[float] = []
    train_dpo(tiny_lm, data, tmp_path / "fresh", cfg, progress=lambda s, n, loss: fresh.append(loss))
    assert fresh[0] == pytest.approx(math.log(2), abs=1e-5)  # a fresh adapter is the base, its reference


def test_a_dpo_pair_too_long_for_max_len_is_an_error_naming_it(tiny_lm: Path, tmp_path: Path) -> None:
    """Mutant (what it was): truncated from the right to max_len, so a long prompt left no reply token to score
    and the pair trained on nothing."""
    long_prompt = " ".join("abcdefghij")  # <user> + 10 + <end> + <assistant> = 13 prompt tokens
    data = _pairs(tmp_path / "p.jsonl", [("a", "b", "c"), (long_prompt, "d e", "f")])
    # Pair 1: prompt 13 + chosen 3 (d e <end>) = 16 tokens, rejected 2.
    with pytest.raises(TrainingDataError, match=r"p.jsonl: 1 of 2 DPO pairs are longer than max_len=12 tokens; the "
                       r"first is line 2 \(pair 1, chosen traj-c1, rejected traj-r1\): prompt 13 \+ chosen 3 / "
                       r"rejected 2 tokens\. .*Raise DPOConfig.max_len \(\[dpo\] max_len\) to at least 16"):
        train_dpo(tiny_lm, data, tmp_path / "out", DPOConfig(steps=1, max_len=12))
    assert train_dpo(tiny_lm, data, tmp_path / "out", DPOConfig(steps=1, max_len=16)).pairs == 2


def test_the_dpo_step_continues_the_serving_adapter(tiny_lm: Path, tmp_path: Path, monkeypatch: Any) -> None:
    """The job's DPO step asks the gateway for the serving version and continues its adapter; with
    `reference = "base"` (or a serving version that is the base model) it trains a fresh adapter."""
    import server

    from trainer._base_model import write_lora_adapter
    from trainer._job import JobConfig
    from trainer._rl_steps import _dpo_train
    from trainer._steps import JobContext, TrainData

    serving = write_lora_adapter(tiny_lm, tmp_path / "serving", seed=3, rank=4)
    adapter_path: list[Optional[str]] = [str(serving)]
    asked: list[str] = []

    class Admin:
        def __init__(self, url: str, token: Optional[str]) -> None:
            asked.append(url)

        def __enter__(self) -> "Admin":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def versions(self) -> Any:
            v = SimpleNamespace(name="policy-v3", adapter_path=adapter_path[0])
            return SimpleNamespace(serving="policy-v3", versions=[SimpleNamespace(name="policy-v0", adapter_path=None), v])

    monkeypatch.setattr(server, "AdminClient", Admin)
    data = _pairs(tmp_path / "p.jsonl", [("a b", "c d", "e f")])

    def run(name: str, **dpo: Any) -> tuple[Any, dict[str, Any]]:
        job = JobConfig(base_model_dir=tiny_lm, collector_db="sqlite://", dpo=DPOConfig(steps=1, batch_size=1, **dpo))
        (tmp_path / "runs" / name).mkdir(parents=True)
        ctx = JobContext(job, name, tmp_path / "runs" / name, say=lambda _: None, check_stop=lambda: None)
        trained = _dpo_train(ctx, TrainData(data, 1, "sha"))
        return trained, json.loads((trained.adapter_dir / "looplift_dpo.json").read_text())

    trained, meta = run("serving")
    assert trained.metrics["init"] == "policy-v3" and meta["init_adapter"] == str(serving) and len(asked) == 1
    trained, meta = run("base", reference="base")
    assert trained.metrics["init"] is None and meta["init_adapter"] is None and len(asked) == 1  # not asked
    adapter_path[0] = None  # the serving version is the base model itself
    trained, meta = run("base-serving")
    assert trained.metrics["init"] is None and meta["init_adapter"] is None and meta["reference"] == "base"
    with pytest.raises(ConfigError, match=r"\[dpo\] reference\) = 'served': choose one of serving, base"):
        DPOConfig(reference="served")
