#!/usr/bin/env bash
# Record the all-reduce sweep's multi-node mode (roles/nccl/files/gpuhost_allreduce_sweep.py,
# issue 30) on the one-GPU device host into $OUT/ (copied to
# tests/fixtures/gpu-hosts/h100x1-multinode/). One host plays both nodes over its own
# non-loopback address: gloo (CPU) for a whole two-node run, NCCL for the bounded failures.
# Run from the repo root; torch at /opt/torch/.venv.
set -u
PY=/opt/torch/.venv/bin/python
S=roles/nccl/files/gpuhost_allreduce_sweep.py
D=${OUT:?}
T=$(mktemp -d)
# The default route's interface and its IPv4 address (without iproute2: the device host has
# no `ip`): /proc/net/route, then SIOCGIFADDR through Python.
IFACE=$(awk '$2 == "00000000" {print $1; exit}' /proc/net/route)
[ -n "$IFACE" ] || IFACE=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
ADDR=$("$PY" -c 'import fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
packed = struct.pack("256s", sys.argv[1].encode()[:15])
print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, packed)[20:24]))' "$IFACE" 2>/dev/null)
{
  date -u +%FT%TZ; nvidia-smi -L; echo "iface=$IFACE addr=$ADDR"
  "$PY" -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'
  echo "== /sys/class/infiniband"; ls /sys/class/infiniband 2>&1
  for i in /sys/class/net/*; do echo "$i speed=$(cat "$i/speed" 2>/dev/null || echo unreadable)"; done
} > "$D/env.txt" 2>&1
(ip -j addr show 2>&1 || cat /proc/net/if_inet6 /proc/net/route) > "$D/ip-addr.json"
cfg() { # nnodes node_rank nproc backend join_timeout extra-env-json
  printf '{"nnodes": %s, "node_rank": %s, "nproc": %s, "backend": "%s", "master_addr": "%s",
    "master_port": 29611, "min_bytes": 32768, "max_bytes": 16777216, "timeout_s": 90,
    "join_timeout_s": %s, "candidates": [{"name": "derived", "env": %s}]}' \
    "$1" "$2" "$3" "$4" "$ADDR" "$5" "$6"
}
t() { local s=$SECONDS; "$@"; echo "rc=$? wall_s=$((SECONDS - s))" >&2; }
GENV="{\"GLOO_SOCKET_IFNAME\": \"$IFACE\"}"
NENV="{\"NCCL_SOCKET_IFNAME\": \"=$IFACE\", \"NCCL_IB_DISABLE\": \"1\"}"
{
  echo "== A: gloo, 2 nodes x 2 processes (world 4), both nodes started"
  t "$PY" $S --config "$(cfg 2 1 2 gloo 30 "$GENV")" > "$T/a-node1.json" &
  t "$PY" $S --config "$(cfg 2 0 2 gloo 30 "$GENV")" > "$T/a-node0.json"; wait
  echo "== B: nccl, node 0 alone of 2 (node 1 never joins), join timeout 15 s"
  t "$PY" $S --config "$(cfg 2 0 1 nccl 15 "$NENV")" > "$T/b-node0.json"
  echo "== C: nccl, node 1 alone (rank 0 never starts), join timeout 15 s"
  t "$PY" $S --config "$(cfg 2 1 1 nccl 15 "$NENV")" > "$T/c-node1.json"
  echo "== D: nccl, 2 nodes x 1 process, both on the host's one GPU"
  t "$PY" $S --config "$(cfg 2 1 1 nccl 30 "$NENV")" > "$T/d-node1.json" &
  t "$PY" $S --config "$(cfg 2 0 1 nccl 30 "$NENV")" > "$T/d-node0.json"; wait
  echo "== E: bad input (rank out of range, loopback master)"
  t "$PY" $S --config '{"nnodes": 2, "node_rank": 5, "nproc": 1, "master_addr": "127.0.0.1", "master_port": 29611}'
} > "$D/run.log" 2>&1
# One file of results (the device tool brings back 8 files at most): {case-node: its JSON}.
"$PY" - "$T" > "$D/results.json" <<'PYEOF'
import json, os, sys
out = {}
for name in sorted(os.listdir(sys.argv[1])):
    with open(os.path.join(sys.argv[1], name)) as handle:
        text = handle.read().strip()
    try:
        out[name[:-5]] = json.loads(text.splitlines()[-1]) if text else None
    except ValueError:
        out[name[:-5]] = {"unparsed": text[-2000:]}
print(json.dumps(out, indent=1))
PYEOF
cat "$D/run.log"
