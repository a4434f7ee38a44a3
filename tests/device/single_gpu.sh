#!/usr/bin/env bash
# Record preflight and the nccl role (verification on) on a real one-GPU host (the `device`
# tool's nvidia-h200 kind) into $OUT/h200x1/ (copied to tests/fixtures/gpu-hosts/h200x1-real/).
# One GPU: the decision must be `single` with an empty env, the sweep skipped with its reason,
# nccl.env still written, and a second run must change nothing. Run from the repo root with
# ansible-core carried as wheels in .whl/ and ansible.posix in .device/collections.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PATH=/tmp/site/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH=$PWD/.device/collections ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
D=${OUT:?}/h200x1
mkdir -p "$D"
PY=$(command -v python3)
DIRS=(-e gpuhost_service_group=root -e gpuhost_base_dir=/tmp/gh/opt
  -e gpuhost_config_dir=/tmp/gh/etc -e gpuhost_state_dir=/tmp/gh/var)
{
  date -u +%FT%TZ; echo "$PY"; "$PY" --version; ansible-playbook --version | head -1
  nvidia-smi -L; cat /proc/driver/nvidia/version
  /opt/torch/.venv/bin/python -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'
} > "$D/env.txt" 2>&1
{
  for a in "topo -m" "topo -p2p r" "topo -p2p w"; do echo "== nvidia-smi $a"; nvidia-smi $a; done
  echo "== --query-gpu"; nvidia-smi --query-gpu=index,pci.bus_id,compute_cap,name --format=csv
  echo "== nvlink -s"; nvidia-smi nvlink -s
} > "$D/raw.txt" 2>&1
nvidia-smi -q -x > "$D/nvidia-smi-q.xml" 2>&1
pre() { ansible-playbook playbooks/preflight.yml -i inventory/local \
  -e @tests/fixtures/gpu-hosts/h200x1-real/inventory-vars.yml -e ansible_become=false "$@"; }
{ pre; echo "rc=$?"; pre --check --diff; echo "check rc=$?"; } > "$D/preflight.log" 2>&1
cp .cache/facts/*localhost* "$D/facts-cache.json" 2>/dev/null
nb() { bench/nccl-allreduce.sh "$1" -e nccl_verify_python=/opt/torch/.venv/bin/python \
  -e nccl_verify_timeout=90 "${DIRS[@]}"; }
{ nb .cache/h200x1-nccl.json; echo "rc=$?"; echo "== second run"; nb .cache/h200x1-rerun.json
  echo "rc=$?"; echo "== nccl.env"; cat /tmp/gh/etc/nccl.env; } > "$D/nccl.log" 2>&1
cp .cache/h200x1-nccl.json "$D/nccl.json"
grep -E "rc=|ok=|skipped|single|FAILED|fatal" "$D/preflight.log" "$D/nccl.log" | tail -30
