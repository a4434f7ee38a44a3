#!/usr/bin/env bash
# NCCL bench on this machine's GPUs: runs bench/nccl.yml (the nccl role with autotune and
# verification) and prints, per size from 64 MiB to 1 GiB, the derived env's busbw as a
# ratio of the best candidate measured in the same run.
#   bench/nccl-allreduce.sh [OUT.json] [extra ansible-playbook args, e.g. -e nccl_verify_python=...]
set -euo pipefail
start=$PWD
cd "$(dirname "$0")/.."
# The project's venv first on PATH (no activated venv needed), or one line on what to run.
eval "$(python3 scripts/project_tools.py bench/nccl-allreduce.sh ansible-playbook || echo exit 2)"
# OUT as given (relative to where the script was started), else .cache/ of the checkout.
out="${1:-$PWD/.cache/nccl-bench.json}"
shift || true
case "$out" in /*) ;; *) out="$start/$out" ;; esac
mkdir -p "$(dirname "$out")"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
rc=0
# bench/group_vars links to the project's group_vars/, so every shared setting applies.
ansible-playbook -i localhost, bench/nccl.yml -e nccl_autotune=true -e nccl_autotune_force=true \
  -e "bench_nccl_out=$out" -e "ansible_python_interpreter=$(command -v python3)" "$@" || rc=$?
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))["gpuhost_nccl"]
tune = data.get("autotune") or {}
for cand in tune.get("candidates", []):
    sizes = {int(k): v for k, v in cand.get("busbw_gbps", {}).items()}
    big = ", ".join(f"{k >> 20}M {v:.1f}" for k, v in sorted(sizes.items()) if k >= 64 << 20)
    print(f"{cand['name']:>14}  env={json.dumps(cand['env'])}  busbw GB/s: {big}")
ratios = tune.get("derived_ratio_to_best", {})
if ratios:
    print("derived / best:", ", ".join(f"{int(k) >> 20}M {v:.3f}" for k, v in sorted(ratios.items(), key=lambda i: int(i[0]))),
          f"(min {tune.get('derived_min_ratio')}, chosen: {tune.get('chosen')})")
verify = data.get("verify") or {}
print("verify:", verify.get("status"), "-", verify.get("message"))
PY
exit "$rc"
