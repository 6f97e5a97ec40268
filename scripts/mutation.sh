#!/usr/bin/env bash
# Mutation testing (mutmut 3) of the decision-critical modules: does a test fail when the decision code is changed?
#
#   scripts/mutation.sh                   # canary stats gate (the default set)
#   scripts/mutation.sh canary loss       # any of: canary stats gate loss
#   MUTATION_JOBS=2 MUTATION_DIR=/tmp/x scripts/mutation.sh
#
# Each module is run in its own scratch copy ($MUTATION_DIR/<module>: the packages, tests/ and a pyproject.toml with
# the module's own [tool.mutmut] section), so the working tree is never mutated and each module is checked against
# only the fast tests that cover it. Only the decision code is mutated: the functions/classes named below (the rest
# of the file, e.g. the canary's polling loop, is wrapped in `# pragma: no mutate start/end` IN THE COPY ONLY), and
# lines that raise an error (the message text) and the verdicts' report text (reason strings, lines of the figures
# dict) are not mutated. Prints per module: mutants, killed, survived,
# timeout, score (killed+timeout / all), then the survivors (`mutmut show <name>` in the module's scratch dir shows
# the diff). Exit status 1 when a module scores under $MUTATION_MIN (default 90).
# Cost measured on 2 shared cores, one job (MUTATION_JOBS=1): canary 467 mutants ~5 min, stats 71 mutants ~1 min,
# gate 407 mutants ~12 min (tests/test_gate_job.py dominates): ~18 min for the default set; loss (grpo_loss,
# advantages, dpo_loss; tests/test_rl_loss.py alone) 113 mutants ~4 min.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT="$(dirname "$PY")/mutmut"
DIR="${MUTATION_DIR:-${TMPDIR:-/tmp}/looplift-mutation}"
JOBS="${MUTATION_JOBS:-1}"
MIN="${MUTATION_MIN:-90}"
[ -x "$MUTMUT" ] || { echo "mutmut is not installed: $PY -m pip install -e '.[dev]'" >&2; exit 2; }

# module -> files to mutate | names (top-level def/class) that hold the decision code ("*" = all) | tests
spec() {
  case "$1" in
    canary) echo 'trainer/_sequential.py trainer/_canary.py|*:_sequential WatchConfig CanaryConfig LiveSignal live_signals judge_canary judge_watch|tests/test_canary.py tests/test_canary_sim.py' ;;
    stats)  echo 'sdk/_stats.py|*|tests/test_canary.py tests/test_gate.py tests/test_public_api.py' ;;
    gate)   echo 'trainer/_gate.py trainer/_gate_ledger.py|spending_level in_report_split split GateConfig _rate _report_rate _slices gate ledger_path GateLedger|tests/test_gate.py tests/test_gate_sim.py tests/test_gate_job.py' ;;
    loss)   echo 'trainer/grpo.py trainer/dpo.py|advantages grpo_loss dpo_loss|tests/test_rl_loss.py' ;;
    *) echo "unknown module $1 (canary stats gate loss)" >&2; return 2 ;;
  esac
}

# Wrap every top-level def/class of FILE not in KEEP in `# pragma: no mutate start` / `end` (in the scratch copy).
fence() {
  "$PY" - "$@" <<'EOF'
import ast, sys
path, keep = sys.argv[1], set(sys.argv[2].split())
if "*" in keep:
    sys.exit(0)
lines = open(path, encoding="utf-8").read().split("\n")
spans = []
for node in ast.parse("\n".join(lines)).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name not in keep:
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        spans.append((start, node.end_lineno))
for start, end in reversed(spans):
    lines[end:end] = ["# pragma: no mutate end", "_mutmut_fence = None"]
    lines[start - 1:start - 1] = ["# pragma: no mutate start"]
open(path, "w", encoding="utf-8").write("\n".join(lines))
EOF
}

run_module() {
  local name="$1" s files keep tests work t0
  s="$(spec "$name")" || return 2
  IFS='|' read -r files keep tests <<<"$s"
  work="$DIR/$name"
  rm -rf "$work" && mkdir -p "$work"
  # The packages the tests import come from the editable install (unmutated); trainer/ and sdk/ from the copy.
  (cd "$ROOT" && tar --exclude=__pycache__ --exclude=bench/results -cf - trainer sdk tests bench pyproject.toml) | (cd "$work" && tar -xf -)
  local existing=() f
  for f in $files; do [ -f "$work/$f" ] && existing+=("$f"); done
  local t existing_tests=()
  for t in $tests; do [ -f "$work/$t" ] && existing_tests+=("$t"); done
  for f in "${existing[@]}"; do
    local k="${keep}" base; base="$(basename "$f" .py)"
    # "*:_sequential" means: all of the file whose base name follows the colon, the listed names elsewhere.
    if [[ "$k" == \*:* ]]; then
      local all="${k%% *}"; all="${all#*:}"; k="${k#* }"
      [ "$base" = "$all" ] && k='*'
    fi
    fence "$work/$f" "$k"
  done
  "$PY" - "$work/pyproject.toml" "${#existing[@]}" "${existing[@]}" "${existing_tests[@]}" <<'EOF'
import re, sys, json
path, n = sys.argv[1], int(sys.argv[2])
files, tests = sys.argv[3:3 + n], sys.argv[3 + n:]
text = open(path, encoding="utf-8").read()
text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", text)
fast = "not vllm and not slow and not model_build and not docker and not postgres and not chromium and not image3d"
text += "\n[tool.mutmut]\n" + "\n".join([
    'source_paths = ["trainer", "sdk"]',
    'also_copy = ["bench"]',  # tests load bench/*_sim.py by path
    f"only_mutate = {json.dumps(files)}",
    # Not decision code: error messages, the verdicts' report text (reason strings, the figures dict's keys and
    # constants: the record of a decision, not the decision).
    'do_not_mutate_patterns = ["raise \\\\w*Error\\\\(", "^\\\\s*f?\\"[^\\"]*\\"\\\\)?,?$", '
    '"^\\\\s*\\"[a-z_]+\\": ", "^\\\\s*(live|what|tested|reason) = \\\\(?f\\"", "^\\\\s*figures \\\\|= "]',
    f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-m", "{fast}"]',
    f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
    "use_git_change_detection = false",
]) + "\n"
open(path, "w", encoding="utf-8").write(text)
EOF
  t0=$(date +%s)
  # One OpenMP/MKL thread: mutmut forks a child per mutant after torch ran in the parent, and a forked child
  # whose parent started an OpenMP thread pool hangs in its first parallel op (every mutant a timeout).
  (cd "$work" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$MUTMUT" run --max-children "$JOBS" >"$work/run.log" 2>&1) || { echo "== $name: mutmut failed, see $work/run.log"; tail -20 "$work/run.log"; return 1; }
  (cd "$work" && "$MUTMUT" export-cicd-stats >/dev/null && "$MUTMUT" results >"$work/survivors.txt" 2>&1) || true
  "$PY" - "$name" "$work" "$(( $(date +%s) - t0 ))" "$MIN" <<'EOF'
import json, sys
name, work, secs, floor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
s = json.load(open(f"{work}/mutants/mutmut-cicd-stats.json"))
done = s["killed"] + s["survived"] + s["timeout"] + s["suspicious"] + s["segfault"]
score = 100.0 * (s["killed"] + s["timeout"]) / max(1, done)
print(f"== {name}: {s['total']} mutants, {s['killed']} killed, {s['survived']} survived, {s['timeout']} timeout, "
      f"{s['no_tests']} no tests, {s['suspicious']} suspicious, {s['skipped']} skipped: score {score:.1f}% ({secs} s)")
for line in open(f"{work}/survivors.txt"):
    if line.strip():
        print("   ", line.rstrip())
sys.exit(0 if score >= floor else 1)
EOF
}

status=0
for m in "${@:-canary stats gate}"; do
  for mm in $m; do run_module "$mm" || status=1; done
done
exit $status
