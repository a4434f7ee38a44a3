#!/usr/bin/env bash
# Make sure a working docker daemon is reachable: install docker.io (and debootstrap, which
# builds the base images) with apt when missing, and start dockerd when nothing runs it.
# The machines this runs on have no init system that would start dockerd for us.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ((${#need[@]})); then
  echo "ensure-docker: installing ${need[*]} with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" iptables >/dev/null
fi

if docker info >/dev/null 2>&1; then
  exit 0
fi

echo "ensure-docker: starting dockerd (log: /var/log/gpuhost-dockerd.log)"
# setsid: the daemon must outlive this make target and the test session that started it.
setsid dockerd >/var/log/gpuhost-dockerd.log 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 1
done
echo "ensure-docker: dockerd did not come up in 60 s; last lines of its log:" >&2
tail -n 20 /var/log/gpuhost-dockerd.log >&2
exit 2
