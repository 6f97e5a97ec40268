"""Default values for the trainer package, in one place (STYLE 3).

Every default a config field, a `looplift.toml` key or a CLI flag falls back to lives here, so that
changing one changes it everywhere. Nothing in this module has behaviour.
"""

from __future__ import annotations

#: Gateway the retrain job loads candidates into and promotes on.
GATEWAY_URL = "http://127.0.0.1:8000"
#: How long a job keeps trying a gateway that refuses connections before it publishes (a restarting `looplift up`
#: is back in one to two minutes); a gateway that answers with an error fails the job at once.
GATEWAY_CONNECT_WAIT_S = 180.0
#: The alias that names the serving version.
ALIAS = "policy"

# ---- the retrain job ---------------------------------------------------------------------------
#: Rejection sampling: only trajectories with at least this reward are trained on.
MIN_REWARD = 1.0
#: A run with fewer exported examples is skipped.
MIN_EXAMPLES = 8
#: The training algorithm (a name in `TRAIN_STEPS` or `PKG.MODULE:ATTR`).
ALGO = "sft"
#: Episodes of the eval suite run at once against the gateway.
EVAL_CONCURRENCY = 16
#: Processes the train stage runs on (more than one: under torchrun, one per device).
NPROC = 1
#: How a model is spread over those processes: "ddp" (a replica each) or "fsdp" (sharded).
STRATEGY = "ddp"
#: Sampling seed of the gate when the suite's `Sampling.seed` is None (a paired test needs seeds).
EVAL_SEED = 0

# ---- the gate ----------------------------------------------------------------------------------
#: Family-wise one-sided significance level per app: the k-th gate of an app tests the exact McNemar p-value
#: at alpha * 6 / (pi^2 k^2) (alpha spending, `trainer._gate`), so all of an app's gates together promote an
#: equal candidate with probability <= alpha. The first gate tests at 0.0304: a clean win of 6 discordant
#: pairs (p = 1/64) promotes, 5 (p = 1/32) does not; the second at 0.0076, the 20th at 7.6e-5.
GATE_ALPHA = 0.05
#: Share of the eval suite's tasks (chosen by a hash of the task id) that never decide a promotion: the
#: held-out success reported for a version comes from them. 0.3: 74 of the demo's 100 tasks select, 26 report.
GATE_REPORT_FRACTION = 0.3
#: An eval episode that errored (environment, verifier, generation) is re-run up to this many times with the
#: same seed; still erroring, the gate refuses to decide (an error is never counted as a failure).
GATE_EVAL_RETRIES = 2
#: A declared slice may lose at most this much success rate (absolute, 0-1) for a promotion.
GATE_SLICE_TOLERANCE = 0.05
#: The task-data key that names a task's slice (`EvalSuite.slice_key`).
SLICE_KEY = "slice"
#: The slice of a task that names none.
DEFAULT_SLICE = "all"

# ---- the scheduler -----------------------------------------------------------------------------
#: Seconds between two looks at the triggers.
POLL_S = 30.0
#: Window over which the serving version's live success is measured for the drift trigger (seconds).
DRIFT_WINDOW_S = 24 * 3600.0
#: Fewer live episodes than this in the window: no drift decision (too noisy).
DRIFT_MIN_EPISODES = 30

# ---- files -------------------------------------------------------------------------------------
#: The config file `trainer` and `looplift up` read (from the CWD, then `$LOOPLIFT_HOME`).
CONFIG_FILENAME = "looplift.toml"
#: Environment variable naming a config file explicitly.
CONFIG_ENV = "LOOPLIFT_CONFIG"

# ---- prompt suites -----------------------------------------------------------------------------
#: Completion tokens per turn in a prompt-only suite built from held-out data.
PROMPT_MAX_TOKENS = 128

# ---- the canary watch ----------------------------------------------------------------------------
#: Error level of the canary's always-valid tests (`trainer._sequential`): promote when the e-value for
#: "candidate better" reaches 1/this, drop when the one for "worse" does, roll back when the one for "fell"
#: does. Each error has probability <= this at any polling cadence.
CANARY_ALPHA = 0.05
#: Live episodes (with a verifier outcome, else with a rating) each side needs before any canary decision.
CANARY_MIN_SAMPLES = 30
#: Once both sides have this many episodes and neither test decided, the candidate is dropped (not shown
#: better live; the serving version stays).
CANARY_MAX_SAMPLES = 400
#: After a promotion, how long (seconds) its live signal is watched for an automatic rollback.
CANARY_WATCH_S = 3600.0
#: Live episodes after the promotion before the watch may roll back (the test is valid from the first; this
#: keeps a handful of early failures from deciding on their own).
CANARY_WATCH_MIN_SAMPLES = 30
#: Roll back when live success since the promotion is shown to be more than this (absolute, 0-1) below the
#: replaced version's in the watch window before it; a smaller fall never rolls back.
CANARY_WATCH_TOLERANCE = 0.10
#: Seconds between two looks of `trainer canary watch`.
CANARY_POLL_S = 15.0

# ---- RL losses -----------------------------------------------------------------------------------
#: GRPO's dual-clip constant c (Ye et al. 2020; verl's `clip_ratio_c`): for a negative advantage the
#: per-token objective is max(min(r·A, clip(r)·A), c·A), so a token whose ratio r grew far past
#: 1 + clip_high adds at most c·|A| to the loss, and no gradient. Must exceed 1 + clip_high; 0 turns it off.
GRPO_DUAL_CLIP = 3.0
#: DPO's reference and starting point in the retrain job: "serving" continues the serving version's adapter
#: (the policy that produced the pairs), which is also the reference; "base" trains a fresh adapter with the
#: base model as reference. A serving version without an adapter (the base itself) is "base" either way.
DPO_REFERENCE = "serving"

#: Optimizer steps of the tiny base model `looplift up` / `looplift demo` build (`BaseModelConfig.steps`); also the
#: default of `trainer build-base`, which must build that same model (the cache key includes the steps).
BASE_MODEL_STEPS = 1_000
