#!/usr/bin/env bash
# The wheel is the product: build kvx's wheel from the checkout's sources, install it (not editable) into a
# fresh venv outside the checkout, and from a folder outside the checkout run a small sweep (reader=tiny)
# and the aggregate with that venv's python. .ci/run runs it; a developer can too:
#
#   bash scripts/wheel_check.sh               # the venv gets every dependency afresh, as `pip install kvx`
#                                             # does (torch's CPU build pinned as in scripts/setup.sh)
#   bash scripts/wheel_check.sh --reuse-deps  # faster: the venv sees .venv's packages (not its editable kvx)
#                                             # and installs only what the wheel needs beyond them
#
# --reuse-deps cannot catch an import of a package that kvx does not declare but .venv holds (its dev,
# launcher, server and embedded packages); CI runs the first form. KEEP=1 keeps the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
REUSE=
case "${1:-}" in
  "") ;;
  --reuse-deps) REUSE=1 ;;
  *) echo "usage: bash scripts/wheel_check.sh [--reuse-deps]" >&2; exit 2 ;;
esac
# the interpreter .venv was made from (with --reuse-deps its packages must match it)
if [ -x .venv/bin/python ]; then
  BASE=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
else
  [ -z "$REUSE" ] || { echo "wheel_check: --reuse-deps needs .venv (bash scripts/setup.sh)" >&2; exit 2; }
  BASE=${PYTHON:-python3}
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvx-wheel.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
case "$WORK/" in "$REPO"/*) echo "wheel_check: the work folder $WORK is inside the checkout" >&2; exit 2 ;; esac
[ -n "${KEEP:-}" ] && echo "wheel_check: work folder $WORK (kept)" || trap 'rm -rf "$WORK"' EXIT
LOG=$WORK/log
start=$SECONDS
step() {  # step NAME COMMAND...: run it with its output in $LOG; on failure show the end of it and stop
  local name=$1 t=$SECONDS
  shift
  echo "== $name" >>"$LOG"
  if ! "$@" >>"$LOG" 2>&1; then
    echo "wheel_check: $name failed; the end of its output ($LOG):" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
  echo "wheel_check: $name ($((SECONDS - t)) s)"
}

# 1. The wheel, built (in an isolated build environment, from build-system.requires) from a copy of the
#    files git sees (tracked, and untracked but not ignored): setuptools builds through build/lib and keeps
#    what an earlier build left there, so a wheel built in place can hold packages the package list lacks.
mkdir "$WORK/src" "$WORK/dist"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue  # deleted in the work tree, not yet in the index
  mkdir -p "$WORK/src/$(dirname "$f")" && cp -p "$f" "$WORK/src/$f"
done
step "venv" "$BASE" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
step "pip" "$VPY" -m pip install -q --upgrade pip
step "build the wheel" "$VPY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL=$(echo "$WORK"/dist/kvx-*.whl)
[ -f "$WHEEL" ] || { echo "wheel_check: no kvx wheel in $WORK/dist" >&2; exit 1; }

# 2. The wheel installed, not editable, with what it depends on.
if [ -n "$REUSE" ]; then
  # .venv's packages through a folder of links, less its editable kvx (dist-info, finder and .pth: a
  # second kvx distribution would register every entry point twice) and its installer (the venv has its
  # own); site.addsitedir reads the .pth files among them as .venv does
  SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  DEV_SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  mkdir "$WORK/deps"
  for p in "$DEV_SITE"/* "$DEV_SITE"/.[!.]*; do
    [ -e "$p" ] || continue
    case "${p##*/}" in
      kvx-*.dist-info | __editable__*kvx* | __editable___kvx* | pip | pip-*.dist-info | __pycache__) ;;
      *) ln -s "$p" "$WORK/deps/" ;;
    esac
  done
  echo "import site; site.addsitedir('$WORK/deps')" >"$SITE/kvx-wheel-check-deps.pth"
fi
step "install torch (CPU)" "$VPY" -m pip install -q "torch==2.13.0"
step "install the wheel" "$VPY" -m pip install -q "$WHEEL"

# 3. From a folder outside the checkout, with nothing of the checkout on sys.path: the installed kvx is the
#    venv's, and it sweeps and aggregates.
RUN=$WORK/run
mkdir "$RUN"
kvx_env() {
  (cd "$RUN" && env -u PYTHONPATH -u PYTHONHOME -u MLFLOW_TRACKING_URI -u KVX_DISABLE_PLUGINS \
    KVX_CACHE_DIR="$WORK/cache" TOKENIZERS_PARALLELISM=false "$@")
}
where=$(kvx_env "$VPY" -c 'import kvx, pathlib; print(pathlib.Path(kvx.__file__).resolve())')
case "$where" in
  "$WORK/venv/"*) ;;
  *) echo "wheel_check: the installed kvx is $where, not the venv's ($WORK/venv)" >&2; exit 1 ;;
esac
version=$(kvx_env "$VPY" -c 'import kvx; print(kvx.__version__)')
[ "$version" != "0+unknown" ] || { echo "wheel_check: kvx.__version__ is $version" >&2; exit 1; }
step "kvx --help" kvx_env "$WORK/venv/bin/kvx" --help
step "sweep" kvx_env "$VPY" -m kvx -m reader=tiny press=snapkv,tova n_sources=2 context_tokens=300 \
  max_new_tokens=4 progress=false
step "aggregate" kvx_env "$VPY" -m kvx.aggregate --strict --quiet
# kvpress's composed press names are configs shipped in the wheel (kvx/conf/press): planned, not run
step "kvpress press names" kvx_env "$VPY" -m kvx -m reader=tiny hydra.sweeper.plan=true \
  press=expected_attention,snap_think,decoding_knorm,chunkkv_knorm
echo "wheel_check: kvx $version from $(basename "$WHEEL"), installed in a fresh venv, swept and aggregated" \
  "outside the checkout ($((SECONDS - start)) s)"
