#!/usr/bin/env bash
# Day-2 captures on a real one-GPU host (the `device` tool's nvidia-h200 kind) into
# $OUT/day2/ (copied to tests/fixtures/doctor/h200x1-real/ and tests/fixtures/gpu-samples/):
# nvidia-smi -q -x, dmon, --query-gpu with the clocks event reasons and PCIe link, NVML through
# nvidia-ml-py, idle and under three phases of load (tests/device/gpu_load.py), and
# playbooks/doctor.yml with connection local, idle and under load. Run from the repo root
# with ansible-core carried as wheels in .whl/ and ansible.posix in .device/collections.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PATH=/tmp/site/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH=$PWD/.device/collections ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
D=${OUT:?}/day2
mkdir -p "$D"
Q=timestamp,index,utilization.gpu,utilization.memory,power.draw,power.limit,power.default_limit
Q=$Q,clocks.sm,clocks.max.sm,clocks.mem,clocks_event_reasons.active
Q=$Q,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_thermal_slowdown
Q=$Q,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sync_boost
Q=$Q,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max
Q=$Q,temperature.gpu,memory.used,memory.total
{
  date -u +%FT%TZ; python3 --version; ansible-playbook --version | head -1
  nvidia-smi -L; cat /proc/driver/nvidia/version; uname -r
  ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* /usr/local/nvidia/lib64/libnvidia-ml.so* 2>&1
  python3 -c 'import pynvml; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))'
} > "$D/env.txt" 2>&1
nvidia-smi -q -x > "$D/idle-q.xml" 2>&1
{ nvidia-smi --query-gpu=$Q --format=csv; echo "rc=$?"; } > "$D/idle-query.csv" 2>&1
{ nvidia-smi dmon -c 3 -s pucvmet; echo "rc=$?"; } > "$D/idle-dmon.txt" 2>&1
python3 tests/device/nvml_dump.py > "$D/idle-nvml.json" 2>&1
GH=(-e ansible_become=false -e gpuhost_cache_dir=/tmp/gh/cache -e gpuhost_config_dir=/tmp/gh/etc
  -e gpuhost_state_dir=/tmp/gh/var)
{ ansible-playbook playbooks/doctor.yml -i inventory/local --check "${GH[@]}"; echo "rc=$?"; } \
  > "$D/doctor-idle.log" 2>&1
# Load: samplers in the background over the three phases.
nvidia-smi dmon -s pucvmet -o T -d 1 > "$D/load-dmon.txt" 2>&1 &
P1=$!
nvidia-smi --query-gpu=$Q --format=csv -lms 500 > "$D/load-query.csv" 2>&1 &
P2=$!
python3 tests/device/gpu_load.py --seconds 12 > "$D/load-phases.txt" 2>&1 &
P3=$!
sleep 6
nvidia-smi -q -x > "$D/load-q.xml" 2>&1
python3 tests/device/nvml_dump.py > "$D/load-nvml.json" 2>&1
{ ansible-playbook playbooks/doctor.yml -i inventory/local --check "${GH[@]}"; echo "rc=$?"; } \
  > "$D/doctor-load.log" 2>&1
wait $P3; echo "load rc=$?" >> "$D/load-phases.txt"
kill $P1 $P2; sleep 1
cp .cache/facts/*localhost* "$D/doctor-facts.json" 2>/dev/null
grep -E "rc=|WARN|FAIL|PASS|phase" "$D"/doctor-*.log "$D/load-phases.txt" | cut -c1-220 | tail -40
