#!/usr/bin/env bash
# Run one stage of `make test`/`make demo`, print how long it took and keep a tally so the
# last stage can print the whole table. Usage: scripts/stage.sh NAME command...
# The stage's output is also kept in .cache/stages/NAME.log; when the stage fails, the lines
# that say why (Ansible's fatal/failed results, pytest's failures, errors) are printed again
# at its end, so the tail of a long CI log names the cause, not only the teardown after it.
set -uo pipefail
name=$1
shift
tally=${GPUHOST_STAGE_TALLY:-.cache/stage-times.tsv}
logdir=${GPUHOST_STAGE_LOGS:-.cache/stages}
mkdir -p "$(dirname "$tally")" "$logdir"
log="$logdir/${name//\//_}.log"
start=$(date +%s)
echo "==> [$name] $*"
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
secs=$(($(date +%s) - start))
printf '%s\t%s\t%s\n' "$name" "$secs" "$rc" >>"$tally"
rm -f "$log.why"
if [ "$rc" -ne 0 ]; then
  # The one place that picks the cause; stage-summary.sh prints this file again.
  grep -n -A 6 -E '^(fatal|failed):|FAILED!|^E  |^FAILED |^ERROR|Error:|Traceback' "$log" |
    tail -n 80 >"$log.why"
  echo "---- [$name] why it failed (from $log) ----"
  cat "$log.why"
fi
echo "<== [$name] ${secs}s (exit $rc)"
exit "$rc"
