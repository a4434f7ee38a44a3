#!/usr/bin/env bash
# Print the per-stage wall times collected by scripts/stage.sh, then clear the tally. A stage
# that failed gets its cause repeated below the table (.cache/stages/NAME.log.why, written by
# scripts/stage.sh), also when a second run of it passed: a flake is reported, not hidden.
tally=${GPUHOST_STAGE_TALLY:-.cache/stage-times.tsv}
logdir=${GPUHOST_STAGE_LOGS:-.cache/stages}
[ -f "$tally" ] || exit 0
total=0
failed=()
echo "Stage times:"
while IFS=$'\t' read -r name secs rc; do
  printf '  %-28s %5ss  %s\n' "$name" "$secs" "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
  total=$((total + secs))
  [ "$rc" = 0 ] || failed+=("$name")
done <"$tally"
printf '  %-28s %5ss\n' total "$total"
for name in "${failed[@]}"; do
  log="$logdir/${name//\//_}.log"
  echo "---- $name failed; why (from $log) ----"
  [ -f "$log.why" ] && tail -n 30 "$log.why"
done
rm -f "$tally"
