#!/usr/bin/env bash
# land.sh — used by parallel workers, each in its own clone of /work/main: rebases the clone's
# current branch onto /work/main's main and fast-forwards main to it, under one lock so two
# landings never interleave. Run from the clone's root after committing; a rebase conflict stops
# here (resolve it, `git rebase --continue`, run again). Optional: LAND_CHECK="cmd" runs after the
# rebase and must pass before main moves (e.g. a build of the targets you touched and their tests).
set -euo pipefail
MAIN=${LAND_MAIN:-/work/main}
exec 9>/tmp/ds4-land.lock
flock 9
git fetch -q "$MAIN" main
git rebase FETCH_HEAD
if [ -n "${LAND_CHECK:-}" ]; then bash -c "$LAND_CHECK"; fi
branch=$(git rev-parse --abbrev-ref HEAD)
git -C "$MAIN" fetch -q "$(pwd)" "$branch"
git -C "$MAIN" merge -q --ff-only FETCH_HEAD
echo "landed: $(git -C "$MAIN" log --oneline -1)"
