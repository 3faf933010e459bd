#!/usr/bin/env bash
# land.sh — used by parallel workers, each in its own clone of /work/main: rebases the clone's
# current branch onto /work/main's main and fast-forwards main to it, under one lock so two
# landings never interleave. Run from the clone's root after committing; a rebase conflict stops
# here (resolve it, `git rebase --continue`, run again). Optional: LAND_CHECK="cmd" runs after the
# rebase and must pass before main moves (e.g. a build of the targets you touched and their tests).
# CUDA sources the branch changed are also compiled for compute_80 (CI's second arch; engineers
# build sm_90 only) through scripts/check_arch80.sh, with the flags of ARCH80_BUILD (default
# build-cuda) when that folder has a compile_commands.json; ARCH80_BUILD=none skips it.
set -euo pipefail
MAIN=${LAND_MAIN:-/work/main}
exec 9>/tmp/ds4-land.lock
flock 9
git fetch -q "$MAIN" main
git rebase FETCH_HEAD
arch80=${ARCH80_BUILD:-build-cuda}
if [ "$arch80" != none ] && [ -f "$arch80/compile_commands.json" ]; then
  bash "$(dirname "$0")/check_arch80.sh" "$arch80" FETCH_HEAD
fi
if [ -n "${LAND_CHECK:-}" ]; then bash -c "$LAND_CHECK"; fi
branch=$(git rev-parse --abbrev-ref HEAD)
git -C "$MAIN" fetch -q "$(pwd)" "$branch"
git -C "$MAIN" merge -q --ff-only FETCH_HEAD
echo "landed: $(git -C "$MAIN" log --oneline -1)"
