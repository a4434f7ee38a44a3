#!/usr/bin/env bash
# Capture for role nccl's "does anything hold the GPUs" reader (issue 28 item 7): the exact
# query the role runs, `nvidia-smi --query-compute-apps=pid,process_name,used_memory
# --format=csv,noheader,nounits`, on an idle GPU and while a torch process holds memory
# (as a serving SGLang does). Writes $OUT/compute-apps/; copied to
# tests/fixtures/nccl/h200x1-compute-apps/. Run from the repository root on the device.
set -u
D=${OUT:?}/compute-apps
mkdir -p "$D"
Q=(--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits)
PY=/opt/torch/.venv/bin/python
[ -x "$PY" ] || PY=python3
{ date -u +%FT%TZ; nvidia-smi -L; cat /proc/driver/nvidia/version; "$PY" -c 'import torch; print(torch.__version__)'; } \
  > "$D/env.txt" 2>&1
{ nvidia-smi "${Q[@]}"; echo "rc=$?"; } > "$D/idle.csv" 2>&1
"$PY" -c 'import torch, time; x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda"); print("held", flush=True); time.sleep(40)' \
  > "$D/holder.log" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q held "$D/holder.log" 2>/dev/null && break; sleep 1; done
sleep 2
{ nvidia-smi "${Q[@]}"; echo "rc=$?"; } > "$D/held.csv" 2>&1
echo "holder pid $holder" >> "$D/env.txt"
kill "$holder"; wait "$holder" 2>/dev/null
{ nvidia-smi "${Q[@]}"; echo "rc=$?"; } > "$D/after.csv" 2>&1
