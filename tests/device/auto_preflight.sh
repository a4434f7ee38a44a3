#!/usr/bin/env bash
# Record `sglang_server_profile: auto` through preflight on a real one-GPU host (the `device`
# tool's nvidia-h200 kind) into $OUT/h200x1-auto/ (copied to
# tests/fixtures/gpu-hosts/h200x1-auto/). Preflight reads the GPU, auto picks the profile that
# fits it, the model-fit check runs on the measured memory, and the run stops at nothing and
# changes nothing, in check mode and for real. The device has no network: the hub cannot be
# reached, so the run says the branch is not pinned (and check mode would write no pin anyway).
# Run from the repo root with ansible-core carried as wheels in .whl/ and ansible.posix in
# .device/collections (the same as tests/device/single_gpu.sh).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PATH=/tmp/site/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH=$PWD/.device/collections ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
D=${OUT:?}/h200x1-auto
mkdir -p "$D"
{
  date -u +%FT%TZ; command -v python3; python3 --version; ansible-playbook --version | head -1
  nvidia-smi -L; cat /proc/driver/nvidia/version
  nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv
} > "$D/env.txt" 2>&1
pre() { timeout 240 ansible-playbook playbooks/preflight.yml -i inventory/local \
  -e @tests/fixtures/gpu-hosts/h200x1-real/inventory-vars.yml -e sglang_server_profile=auto \
  -e ansible_become=false "$@"; }
{ pre --check --diff; echo "check rc=$?"; pre; echo "rc=$?"; } > "$D/preflight.log" 2>&1
cp .cache/facts/localhost "$D/facts-cache.json" 2>/dev/null || cp .cache/facts/*localhost* "$D/facts-cache.json" 2>/dev/null
ls inventory/local > "$D/inventory-after.txt" 2>&1
grep -E "rc=|ok=|auto picked|model fit|not pinned|FAILED|fatal|ERROR" "$D/preflight.log" | tail -30
