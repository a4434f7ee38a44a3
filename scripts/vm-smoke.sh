#!/usr/bin/env bash
# make vm-smoke: one real VM under QEMU (software emulation on this machine), OVMF with
# Secure Boot on, booted from Debian's signed shim/grub/kernel, cloud-init from a NoCloud seed
# rendered like role proxmox_vm's, then `gpuhost check` and `gpuhost provision --tags host`
# over SSH. Not part of `make test` (it takes ~30-60 min here). docs/vm-smoke.md explains it.
#
#   scripts/vm-smoke.sh [all|image|run]     (default: all = image, then run)
#
# Cache: .cache/vm-smoke/ (image build kept between runs); record: .cache/vm-smoke/record/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# The CLI from the project venv first on PATH, or one line saying what to run first; with
# GPUHOST_SETUP_CHECK=1 stop here (scripts/project_tools.py, as scripts/demo.sh does).
eval "$(python3 scripts/project_tools.py scripts/vm-smoke.sh gpuhost || echo exit 2)"
CACHE=${VM_SMOKE_CACHE:-$ROOT/.cache/vm-smoke}
SUITE=${VM_SMOKE_SUITE:-bookworm}
mkdir -p "$CACHE"

log() { printf '%s vm-smoke: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

need_packages() {
  local pkgs=(qemu-system-x86 qemu-utils debootstrap cloud-image-utils ovmf mtools dosfstools
    shim-signed grub-efi-amd64-signed dpkg-dev gnupg openssh-client)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get install -y -q "${missing[@]}" >"$CACHE/apt.log"
  fi
}

# The root file system from Debian packages (debootstrap's default mirror). dkms and the
# headers are in the image only to save VM time: role nvidia_driver asks apt for the same
# packages (dkms, linux-headers-<running kernel>) and finds them present.
build_image() {
  if [[ -s $CACHE/base.qcow2 && -s $CACHE/esp.img ]]; then
    log "image cached ($CACHE/base.qcow2; remove it to rebuild)"
    return
  fi
  local rootfs=$CACHE/rootfs
  if [[ ! -e $rootfs/.gpuhost-debootstrap-done ]]; then
    rm -rf "$rootfs"
    log "debootstrap $SUITE (log: $CACHE/debootstrap.log)"
    timeout 3600 debootstrap --variant=minbase --components=main,contrib \
      --include=systemd-sysv,udev,dbus,kmod,iproute2,ifupdown,isc-dhcp-client,netbase,procps,openssh-server,cloud-init,linux-image-amd64,initramfs-tools,python3,sudo,mokutil,python3-cffi-backend,linux-headers-amd64,dkms,pciutils,ca-certificates,gnupg,openssl \
      "$SUITE" "$rootfs" >"$CACHE/debootstrap.log" 2>&1
    touch "$rootfs/.gpuhost-debootstrap-done"
  fi
  printf '/dev/vda / ext4 defaults 0 1\n' >"$rootfs/etc/fstab"
  printf 'datasource_list: [NoCloud, None]\n' >"$rootfs/etc/cloud/cloud.cfg.d/90-gpuhost-vm-smoke.cfg"
  # cloud-init's ifupdown renderer writes interfaces.d/50-cloud-init.
  printf 'source /etc/network/interfaces.d/*\n\nauto lo\niface lo inet loopback\n' >"$rootfs/etc/network/interfaces"
  rm -f "$rootfs"/etc/ssh/ssh_host_*  # cloud-init makes per-VM host keys
  : >"$rootfs/etc/machine-id"
  # Kernel and initrd for the ESP (the kernel is Debian's signed one).
  cp -L "$rootfs/vmlinuz" "$CACHE/vmlinuz"
  cp -L "$rootfs/initrd.img" "$CACHE/initrd.img"
  log "root file system image"
  rm -f "$CACHE/base.raw"
  truncate -s 6G "$CACHE/base.raw"
  mkfs.ext4 -q -F -L rootfs -d "$rootfs" "$CACHE/base.raw"
  qemu-img convert -O qcow2 "$CACHE/base.raw" "$CACHE/base.qcow2.tmp"
  mv "$CACHE/base.qcow2.tmp" "$CACHE/base.qcow2"
  rm -f "$CACHE/base.raw"
  build_esp
}

# The EFI system partition: Debian's signed shim (first stage, Microsoft-signed), signed grub
# and the signed kernel, as a real FAT image. grub.cfg loads the kernel from the ESP.
build_esp() {
  local esp=$CACHE/esp.img.tmp kver
  kver=$(basename "$(readlink -f "$CACHE/rootfs/vmlinuz")" | sed 's/^vmlinuz-//')
  rm -f "$esp"
  truncate -s 256M "$esp"
  mkfs.vfat -F 32 -n ESP "$esp" >/dev/null
  mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/debian
  mcopy -i "$esp" /usr/lib/shim/shimx64.efi.signed ::/EFI/BOOT/BOOTX64.EFI
  mcopy -i "$esp" /usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed ::/EFI/BOOT/grubx64.efi
  mcopy -i "$esp" /usr/lib/shim/mmx64.efi.signed ::/EFI/BOOT/mmx64.efi
  cat >"$CACHE/grub.cfg" <<GRUB
set timeout=0
menuentry "Debian $kver" {
  linux /vmlinuz root=/dev/vda rw console=ttyS0
  initrd /initrd.img
}
GRUB
  # Debian's signed grub reads its config from the ESP's EFI/debian/grub.cfg.
  mcopy -i "$esp" "$CACHE/grub.cfg" ::/EFI/debian/grub.cfg
  mcopy -i "$esp" "$CACHE/grub.cfg" ::/EFI/BOOT/grub.cfg
  mcopy -i "$esp" "$CACHE/vmlinuz" ::/vmlinuz
  mcopy -i "$esp" "$CACHE/initrd.img" ::/initrd.img
  mv "$esp" "$CACHE/esp.img"
}

case "${1:-all}" in
  image) need_packages; build_image ;;
  run) need_packages; exec "$ROOT/.venv/bin/python" "$ROOT/tests/vm_smoke/driver.py" --cache "$CACHE" ;;
  all) need_packages; build_image; exec "$ROOT/.venv/bin/python" "$ROOT/tests/vm_smoke/driver.py" --cache "$CACHE" ;;
  *) echo "usage: $0 [all|image|run]" >&2; exit 2 ;;
esac
