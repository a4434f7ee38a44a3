#!/usr/bin/env bash
# Record the nvidia_driver + cuda_toolkit roles in check mode on a real GPU host (the `device`
# tool's 2x H200 machine), into $OUT/h200x2-real-driver-check/ (copied to
# tests/fixtures/gpu-hosts/h200x2-real-driver-check/). Nothing there reaches a package
# repository, so the roles must report without one. Run from the repo root with ansible-core
# carried as wheels in .whl/ and ansible.posix in .device/collections (profile_tasks, json).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PATH=/tmp/site/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH=$PWD/.device/collections ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
D=${OUT:?}/h200x2-real-driver-check
mkdir -p "$D"
PY=$(command -v python3)
# What a change would touch: apt config, modprobe.d, profile.d, dkms, the dpkg database.
snap() {
  find /etc/apt /etc/modprobe.d /etc/profile.d /etc/dkms -type f 2>/dev/null | sort | xargs md5sum 2>/dev/null
  dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' 2>/dev/null | md5sum
  readlink -f /usr/local/cuda
}
{
  date -u +%FT%TZ; echo "$PY"; "$PY" --version; ansible-playbook --version
  nvidia-smi --query-gpu=index,name,driver_version --format=csv
  cat /proc/driver/nvidia/version /sys/module/nvidia/version
  ls -ld /usr/local/cuda*
  for n in /usr/local/cuda-*/bin/nvcc; do echo "$n: $("$n" --version | grep release)"; done
  echo '## driver/cuda packages (dpkg)'
  dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\n' 'nvidia*' 'libnvidia*' \
    'libcuda*' cuda-keyring 'cuda-toolkit*' 2>&1 | head -40
  echo '## apt sources'; ls /etc/apt/sources.list.d
  echo '## tools'; command -v apt-cache dpkg-query mokutil modinfo lspci; head -2 /etc/os-release
} > "$D/env.txt" 2>&1
snap > /tmp/before.txt
run() { ansible-playbook tests/device/nvidia_check.yml --check -c local -i localhost, \
  -e ansible_python_interpreter="$PY" "$@"; }
run --diff > "$D/check.log" 2>&1; echo "rc=$?" >> "$D/check.log"
ANSIBLE_STDOUT_CALLBACK=ansible.posix.json ANSIBLE_CALLBACKS_ENABLED=ansible.posix.json \
  run > "$D/check.json" 2> "$D/check-json.stderr"; echo "json rc=$?" >> "$D/check.log"
snap > /tmp/after.txt
{ echo '## before vs after both check runs (apt/modprobe/profile.d/dkms files, dpkg db, /usr/local/cuda)'
  diff /tmp/before.txt /tmp/after.txt && echo 'identical: nothing changed'; } > "$D/unchanged.txt"
tail -45 "$D/check.log"; cat "$D/unchanged.txt"
