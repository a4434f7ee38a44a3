#!/usr/bin/env bash
# Run molecule scenarios one after another, each as a stage of scripts/stage.sh.
# Usage: scripts/molecule-scenarios.sh SCENARIO...
# A scenario that fails runs once more: the stage table keeps the failed first run (its cause
# is printed at its end, scripts/stage.sh), so a flake is reported, never hidden, and a real
# failure fails twice. `make molecule` and both lanes of `make test` run scenarios through
# this one script.
set -euo pipefail
for s in "$@"; do
  if [[ ! $s =~ ^[a-z0-9_]+$ ]] || [ ! -f "molecule/$s/molecule.yml" ]; then
    echo "no molecule scenario '$s': a folder name under molecule/ with a molecule.yml" >&2
    exit 2
  fi
done
for s in "$@"; do
  scripts/stage.sh "molecule-$s" molecule test -s "$s" && continue
  echo "molecule-$s failed; running it once more to tell a flake from a failure"
  scripts/stage.sh "molecule-$s-again" molecule test -s "$s"
done
