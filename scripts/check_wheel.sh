#!/usr/bin/env bash
# CI: the package as a user installs it. Builds the wheel and the sdist (in the dev venv, no downloads:
# --no-isolation), then in a clean venv with nothing but the wheel's own light dependencies checks that
# `import sdk` works without the heavy stacks, that the `cli` extra gives a working `looplift` command, and
# that the wheel carries the files the code reads beside itself (package data).
# Usage: bash scripts/check_wheel.sh [PYTHON]   (default .venv/bin/python, which needs `build`: the dev extra)
# Exits non-zero, saying what is wrong, at the first failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
[[ "$PY" != */* || "$PY" == /* ]] || PY="$PWD/$PY"  # absolute: the checks below run from another directory
t0=$SECONDS
TMP="$(mktemp -d /tmp/looplift-wheel.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

fail() { echo "check_wheel: FAIL: $*" >&2; exit 1; }
t_step=$SECONDS
ok() { echo "  ok ($((SECONDS - t_step)) s): $*"; t_step=$SECONDS; }

# Files the code reads at run time through Path(__file__) (not imported), so a wheel without them
# installs and imports fine and fails later. Keep in step with [tool.setuptools.package-data].
DATA=(
  collector/migrations/env.py
  collector/migrations/script.py.mako
  collector/migrations/versions/0001_initial.py
  collector/static/dashboard/index.html
  collector/static/dashboard/dashboard.js
  collector/static/dashboard/dashboard.css
  envs/_coding/tasks.json
  envs/_modeling/_driver.py
  sandboxes/_inner.py
  sdk/infra/_guardian.py
)

# 1. Build. Setuptools' deprecation warnings (e.g. the license table form, an error from 2027) fail the check.
"$PY" -c "import build" 2>/dev/null || fail "$PY has no 'build' module: install the dev extra (pip install -e '.[dev]')"
if ! "$PY" -m build --no-isolation --outdir "$TMP/dist" >"$TMP/build.log" 2>&1; then
  tail -30 "$TMP/build.log" >&2
  fail "python -m build failed (log above)"
fi
if grep -qE "SetuptoolsDeprecationWarning|[Dd]eprecat" "$TMP/build.log"; then
  grep -E "SetuptoolsDeprecationWarning|[Dd]eprecat" "$TMP/build.log" | sort -u >&2
  fail "the build emits deprecation warnings (above): fix pyproject.toml"
fi
WHEEL="$(ls "$TMP"/dist/looplift-*.whl 2>/dev/null | head -1)"
SDIST="$(ls "$TMP"/dist/looplift-*.tar.gz 2>/dev/null | head -1)"
[ -n "$WHEEL" ] || fail "no wheel in $TMP/dist"
[ -n "$SDIST" ] || fail "no sdist in $TMP/dist"
ok "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB) and $(basename "$SDIST") with no deprecation warning"

# 2. What they carry: the seven packages and their data, a License-Expression; nothing else in the wheel.
"$PY" - "$WHEEL" "$SDIST" "${DATA[@]}" <<'EOF' || fail "the wheel or sdist lacks files (above)"
import sys, tarfile, zipfile

wheel, sdist, data = sys.argv[1], sys.argv[2], sys.argv[3:]
names = set(zipfile.ZipFile(wheel).namelist())
in_sdist = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
bad = [f"wheel lacks {f}" for f in data if f not in names] + [f"sdist lacks {f}" for f in data if f not in in_sdist]
packages = {"sdk", "server", "collector", "trainer", "sandboxes", "envs", "looplift"}
bad += [f"wheel lacks {p}/__init__.py" for p in sorted(packages) if f"{p}/__init__.py" not in names]
tops = {n.split("/", 1)[0] for n in names}
bad += [f"wheel has {t}/ (not a looplift package)" for t in sorted(tops - packages) if not t.endswith(".dist-info")]
bad += [f"wheel has {n}" for n in sorted(names) if "__pycache__" in n or n.endswith(".pyc")]
meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
if "License-Expression: Apache-2.0" not in zipfile.ZipFile(wheel).read(meta).decode():
    bad.append("METADATA has no 'License-Expression: Apache-2.0'")
for b in bad:
    print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
ok "wheel: the 7 packages, nothing else; wheel and sdist carry ${#DATA[@]} data files: ${DATA[*]}"
ok "wheel METADATA: License-Expression: Apache-2.0"

# 3. A clean venv with the wheel alone: the SDK installs light and imports without the heavy stacks.
# The venv has no pip of its own (faster); the dev venv's pip installs into it (--python).
PIP=("$PY" -m pip --python "$TMP/venv/bin/python" install -q --disable-pip-version-check)
install() {  # install "$1" (a wheel, with an extra or not) into the clean venv
  "${PIP[@]}" "$1" >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; fail "pip install $(basename "$1") failed (above)"; }
}
installed() { "$PY" -m pip --python "$TMP/venv/bin/python" list 2>/dev/null | tail -n +3 | awk '{print $1}' | tr '\n' ' '; }
"$PY" -m venv --without-pip "$TMP/venv"
install "$WHEEL"
ok "clean venv with the wheel: $(installed)"
cd "$TMP"  # not the repository: the packages must come from the venv
"$TMP/venv/bin/python" -I - <<'EOF' || fail "the SDK from the wheel alone does not import cleanly (above)"
import sys

import sdk

heavy = {"torch", "vllm", "docker", "sqlmodel", "sqlalchemy", "fastapi", "uvicorn", "transformers", "rich", "typer"}
bad = []
if "site-packages" not in (sdk.__file__ or ""):
    bad.append(f"sdk was imported from {sdk.__file__}, not from the venv")
loaded = sorted({m.split(".")[0] for m in sys.modules} & heavy)
if loaded:
    bad.append(f"import sdk imported {', '.join(loaded)}")
for name in ("run", "arun", "Trajectory", "CollectorClient"):
    if not hasattr(sdk, name):
        bad.append(f"sdk has no {name}")
for b in bad:
    print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
ok "import sdk (base deps only): sdk.run, sdk.arun, sdk.Trajectory, sdk.CollectorClient; no torch/vllm/docker/sqlmodel/fastapi/rich/typer imported"

# 4. The cli extra: the `looplift` command and its groups' help (a group whose extra is missing says which).
install "$WHEEL[cli]"
LL="$TMP/venv/bin/looplift"
help="$("$LL" --help 2>&1)" || { echo "$help" >&2; fail "looplift --help failed (cli extra)"; }
# The commands --help lists (rich's box "│ name  help", or click's plain "  name  help"; `doctor` too once it exists).
mapfile -t cmds < <(sed -nE 's/^(│ |  )([a-z][a-z0-9-]*)( .*)?$/\2/p' <<<"$help")
for c in up demo env; do
  [[ " ${cmds[*]} " == *" $c "* ]] || { echo "$help" >&2; fail "looplift --help does not list '$c'"; }
done
for c in "${cmds[@]}"; do
  out="$("$LL" "$c" --help 2>&1)" || { echo "$out" >&2; fail "looplift $c --help failed (cli extra only)"; }
done
ok "looplift --help and looplift {${cmds[*]}} --help with the cli extra only (typer, rich, click)"
# The collector's console script without its extra (the package itself needs sqlmodel to import): one line
# naming the extra, exit 2, no traceback.
out="$("$TMP/venv/bin/collector" 2>&1)" && fail "collector succeeded without the [collector] extra"
[[ "$out" == *"looplift[collector]"* && "$out" != *Traceback* ]] || { echo "$out" >&2; fail "collector without its extra did not say what to install"; }
ok "the collector console script without its extra says which extra to install"

echo "wheel check passed in $((SECONDS - t0)) s"
