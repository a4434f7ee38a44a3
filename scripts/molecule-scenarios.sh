#!/usr/bin/env bash
# Run molecule scenarios one after another, each as a stage of scripts/stage.sh.
# Usage: scripts/molecule-scenarios.sh [--shared CLAIMS_DIR] SCENARIO...
# A scenario that fails runs once more: the stage table keeps the failed first run (its cause
# is printed at its end, scripts/stage.sh), so a flake is reported, never hidden, and a real
# failure fails twice. `make molecule` and both lanes of `make test` run scenarios through
# this one script.
# --shared CLAIMS_DIR: several lanes run the same list; each scenario runs in the lane that
# claims it first (mkdir CLAIMS_DIR/SCENARIO, which only one process can do) and is skipped in
# the others. Every lane goes on with the next unclaimed one, so no lane idles while another
# still has scenarios waiting. A lane whose scenario failed claims no more.
set -euo pipefail
claims=
if [ "${1:-}" = --shared ]; then
  if [ $# -lt 2 ]; then
    echo "usage: scripts/molecule-scenarios.sh [--shared CLAIMS_DIR] SCENARIO..." >&2
    exit 2
  fi
  claims=$2
  shift 2
  if [ ! -d "$claims" ]; then
    echo "--shared $claims: no such folder (make test creates it for both lanes)" >&2
    exit 2
  fi
fi
for s in "$@"; do
  if [[ ! $s =~ ^[a-z0-9_]+$ ]] || [ ! -f "molecule/$s/molecule.yml" ]; then
    echo "no molecule scenario '$s': a folder name under molecule/ with a molecule.yml" >&2
    exit 2
  fi
done
for s in "$@"; do
  if [ -n "$claims" ] && ! mkdir "$claims/$s" 2>/dev/null; then
    continue
  fi
  scripts/stage.sh "molecule-$s" molecule test -s "$s" && continue
  echo "molecule-$s failed; running it once more to tell a flake from a failure"
  scripts/stage.sh "molecule-$s-again" molecule test -s "$s"
done
