#!/usr/bin/env bash
# Print the per-stage wall times collected by scripts/stage.sh, then clear the tally.
tally=${GPUHOST_STAGE_TALLY:-.cache/stage-times.tsv}
[ -f "$tally" ] || exit 0
total=0
echo "Stage times:"
while IFS=$'\t' read -r name secs rc; do
  printf '  %-28s %5ss  %s\n' "$name" "$secs" "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
  total=$((total + secs))
done <"$tally"
printf '  %-28s %5ss\n' total "$total"
rm -f "$tally"
