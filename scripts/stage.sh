#!/usr/bin/env bash
# Run one stage of `make test`/`make demo`, print how long it took and keep a tally so the
# last stage can print the whole table. Usage: scripts/stage.sh NAME command...
set -uo pipefail
name=$1
shift
tally=${GPUHOST_STAGE_TALLY:-.cache/stage-times.tsv}
mkdir -p "$(dirname "$tally")"
start=$(date +%s)
echo "==> [$name] $*"
"$@"
rc=$?
secs=$(($(date +%s) - start))
printf '%s\t%s\t%s\n' "$name" "$secs" "$rc" >>"$tally"
echo "<== [$name] ${secs}s (exit $rc)"
exit $rc
