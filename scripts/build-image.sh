#!/usr/bin/env bash
# Build a Debian base image with systemd as PID 1, for molecule and the sandbox.
# No registry is reachable, so the image comes from debootstrap + `docker import`.
# Usage: scripts/build-image.sh bookworm|trixie
# The tag carries a hash of this script, so an edit here rebuilds and an unchanged script
# reuses the cached image (a second `make test` builds nothing).
set -euo pipefail

suite=${1:?usage: build-image.sh bookworm|trixie}
case "$suite" in
  bookworm) number=12 ;;
  trixie) number=13 ;;
  *) echo "build-image: unknown suite '$suite' (allowed: bookworm, trixie)" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
eval "$(python3 "$here/project_tools.py" scripts/build-image.sh docker-daemon || echo exit 2)"
recipe_hash=$(sha256sum "$here/build-image.sh" | cut -c1-12)
image="gpuhost/debian:${number}"
stamp="gpuhost/debian:${number}-${recipe_hash}"

if docker image inspect "$stamp" >/dev/null 2>&1; then
  docker tag "$stamp" "$image"
  echo "build-image: $image is cached ($stamp)"
  exit 0
fi

# What every role test needs in the image: systemd and dbus to be PID 1, python3 for
# Ansible, python3-apt for the apt module, sudo for become, and the usual base tools.
packages=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,ca-certificates,iproute2,procps,gnupg,curl,kmod,pciutils,udev

eval "$(python3 "$here/project_tools.py" scripts/build-image.sh debootstrap || echo exit 2)"
rootfs=$(mktemp -d /var/tmp/gpuhost-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "build-image: debootstrap $suite into $rootfs (a few minutes)"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$rootfs.log" 2>&1 || {
  tail -n 30 "$rootfs.log" >&2
  exit 1
}
rm -f "$rootfs.log"

# Container hygiene: no getty on a console that does not exist, no units that need
# hardware, and a machine-id generated at first boot.
rm -f "$rootfs"/etc/machine-id "$rootfs"/var/lib/dbus/machine-id
: >"$rootfs/etc/machine-id"
for unit in getty@tty1.service serial-getty@.service systemd-udevd.service systemd-udev-trigger.service \
  systemd-modules-load.service sys-kernel-config.mount systemd-remount-fs.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
# Keep the apt lists debootstrap fetched: a fresh VM image has them too.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb

tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  - "$stamp" >/dev/null
docker tag "$stamp" "$image"
echo "build-image: built $image ($stamp)"
