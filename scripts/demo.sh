#!/usr/bin/env bash
# `make demo`: provision a local systemd container that stands in for a fresh VM, twice,
# and show that the second run changes nothing. The container has no GPU: steps that need
# one say so and skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# The CLI lives in the project venv (make venv; make demo runs it): put it first on PATH,
# or say in one line what to run first.
eval "$(python3 scripts/project_tools.py scripts/demo.sh gpuhost docker-daemon image:gpuhost/debian:12 ||
  echo exit 2)"

name=gpuhost-sandbox
image=gpuhost/debian:12
# GPUHOST_DEMO_STACK=1 also installs the real pinned SGLang stack (~11 GB, role python_env)
# into the sandbox, so that `gpuhost bench` runs the real sglang.bench_serving against the
# stand-in server. Off by default: it takes minutes and disk.
stack=${GPUHOST_DEMO_STACK:-0}
extra=()
mounts=()
if [ "$stack" = 1 ]; then
  extra=(-e python_env_enabled=true -e python_env_uv_cache_dir=/var/cache/gpuhost-uv)
  # A uv cache shared with the python_env scenario: only the first install downloads.
  mkdir -p "${GPUHOST_UV_CACHE:-/var/cache/gpuhost-uv}"
  mounts=(-v "${GPUHOST_UV_CACHE:-/var/cache/gpuhost-uv}:/var/cache/gpuhost-uv:rw")
fi

echo "==> Starting a fresh sandbox container '$name' ($image, systemd as PID 1, no GPU)"
docker rm -f "$name" >/dev/null 2>&1 || true
# The settings a systemd container needs on these machines (see DESIGN.md); --privileged
# is refused here. NET_ADMIN: the server's nftables port rule, in the container's own network.
docker run -d --name "$name" --hostname "$name" \
  --cap-add SYS_ADMIN --cap-add NET_ADMIN --cgroupns host \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
  --tmpfs /run --tmpfs /run/lock --tmpfs /tmp "${mounts[@]}" \
  "$image" /lib/systemd/systemd >/dev/null
# systemd needs a moment before it answers at all; then wait until it settles.
state=unknown
for _ in $(seq 1 30); do
  state=$(docker exec "$name" systemctl is-system-running --wait 2>/dev/null) && break
  [ -n "$state" ] && break
  sleep 1
done
echo "    systemd in the sandbox: ${state:-not answering}"
if [ "$stack" = 1 ]; then
  # The sandbox reaches PyPI the way this machine does: trust the same extra CAs (an egress
  # proxy's, where there is one).
  for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -e "$crt" ] && docker cp -q "$crt" "$name:/usr/local/share/ca-certificates/"
  done
  docker exec "$name" update-ca-certificates >/dev/null
fi

# TEST DOUBLES where a GPU host has the real things: the stand-in sglang package in the venv
# the unit runs, the NVIDIA device nodes, and an nvidia-smi replaying a recorded host.
venv=/opt/gpuhost/venv
[ "$stack" = 1 ] && venv=/opt/gpuhost-standin/venv
echo "==> Test doubles in the sandbox: the SGLang STAND-IN in $venv, GPU nodes, nvidia-smi, hf"
ansible-playbook -i inventory/sandbox tests/standin/prepare_sglang_host.yml \
  -e "standin_sglang_venv=$venv" -e standin_nvidia_smi_fixture=rtx-pro-6000x8-proxmox-p2p-ns \
  -e standin_hf_cli=true >/dev/null
if [ "$stack" = 1 ]; then
  # python_env owns python_env_venv_dir and installs the real SGLang there (for bench_serving):
  # the unit runs the stand-in from its own venv.
  extra+=(-e "{\"sglang_server_entrypoint\": [\"$venv/bin/python\", \"-m\", \"sglang.launch_server\"]}")
fi

# The newest timestamped run folder (runs/latest is a link to it; skip the link itself);
# where the CLI writes them ($GPUHOST_RUNS_DIR, else runs/).
runs=${GPUHOST_RUNS_DIR:-runs}
latest_report() { ls -1d "$runs"/2*/ 2>/dev/null | sort | tail -n 1; }

echo
echo "==> Check mode on the blank sandbox: gpuhost check -i inventory/sandbox"
echo "    (what a provision would change; nothing is changed)"
gpuhost check -i inventory/sandbox "${extra[@]}" "$@"
# Check mode creates nothing: the service account a provision makes must not exist yet.
if docker exec "$name" getent passwd gpuhost >/dev/null; then
  echo "demo: gpuhost check created the service account on the blank sandbox" >&2
  exit 1
fi

echo
echo "==> First run: gpuhost provision -i inventory/sandbox"
gpuhost provision -i inventory/sandbox "${extra[@]}" "$@"
first=$(latest_report)

echo
echo "==> Second run (must change nothing): gpuhost provision -i inventory/sandbox"
gpuhost provision -i inventory/sandbox "${extra[@]}" "$@"
second=$(latest_report)

python3 - "$first" "$second" <<'PY'
import json, sys
first, second = (json.load(open(d + "report.json")) for d in sys.argv[1:3])
changed = {h: s.get("changed", 0) for h, s in second["hosts"].items()}
print()
print(f"Run records: {sys.argv[1]} and {sys.argv[2]}")
print("Second run changed per host:", changed)
if any(changed.values()):
    sys.exit("demo: the second run changed something: the playbooks are not idempotent")
print("Idempotent: the second run reports changed=0 on every host.")
PY
echo
echo "==> Report of the second run: gpuhost report $second"
if gpuhost report --help >/dev/null 2>&1; then
  gpuhost report "$second"
else
  python3 -m json.tool "$second/report.json"
fi

# Verify (and benchmark) the sandbox server when the provision installed one.
scripts/demo-verify.sh "$name"
