# Host facts besides the GPUs (`gpuhost_host`, schema in docs/facts.md), and Probe, the door
# to the machine that gpu_facts also hands to gpuhost_pci_gpus and gpuhost_nvsmi.
#
# Sources (docs/reference.md §5 for what a guest can see):
#   systemd-detect-virt --vm / --container   (rc 1 and "none" when there is none)
#   /sys/class/dmi/id/{product_name,sys_vendor,bios_vendor}  Q35 shows as
#       "Standard PC (Q35 + ICH9, 2009)"; OVMF as bios_vendor "EDK II"
#   /sys/firmware/efi; Secure Boot through gpuhost_secure_boot (efivarfs, then mokutil)
#   /proc/meminfo, /sys/kernel/mm/transparent_hugepage/enabled, /sys/devices/system/node
#   /sys/kernel/iommu_groups, /proc/cmdline, /sys/class/infiniband
#   /etc/os-release (os-release(5)), uname(2) machine, `systemctl --version`
# Everything touches the machine only through Probe, so tests substitute recorded files.

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secure_boot import (
    read_secure_boot,
)

UNKNOWN = "unknown"


class Probe:
    """The module's only door to the machine: files under `root`, commands with a timeout.

    run() returns (rc, stdout, stderr); rc is None when the tool is missing, and stderr then
    says so. A hung tool (nvidia-smi on a GPU that fell off the bus) times out instead of
    hanging the play.
    """

    def __init__(self, root="/", timeout=30):
        self.root = root
        self.timeout = timeout

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path):
        try:
            with open(self._path(path), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def read_bytes(self, path):
        try:
            with open(self._path(path), "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def listdir(self, path):
        try:
            return sorted(os.listdir(self._path(path)))
        except OSError:
            return None

    def exists(self, path):
        return os.path.exists(self._path(path))

    def readlink_name(self, path):
        try:
            return os.path.basename(os.readlink(self._path(path)))
        except OSError:
            return None

    def run(self, argv):
        if shutil.which(argv[0]) is None:
            return None, "", f"{argv[0]} not found"
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env={**os.environ, "LC_ALL": "C"},
            )
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]} timed out after {self.timeout}s"
        except OSError as exc:
            return None, "", f"{argv[0]}: {exc}"
        return proc.returncode, proc.stdout, proc.stderr

    def statvfs(self, path):
        return os.statvfs(self._path(path))

    def machine(self):
        """uname(2)'s machine: x86_64, aarch64 (what `uname -m` prints)."""
        return os.uname().machine


# --------------------------------------------------------------------------------------
# pure parsers


def parse_detect_virt(rc, out):
    """systemd-detect-virt prints the type and exits 0, or prints 'none' and exits 1."""
    value = (out or "").strip().splitlines()
    value = value[0].strip() if value else ""
    if rc in (0, 1) and value:
        return value
    return None


def dmi_q35(product_name):
    if product_name in (None, UNKNOWN):
        return UNKNOWN
    return "q35" in product_name.lower()


def firmware_kind(efi_present, bios_vendor, dmi_readable):
    """ovmf | uefi | seabios | bios | unknown (docs/reference.md §5: Proxmox `bios: ovmf`)."""
    vendor = (bios_vendor or "").lower()
    if efi_present:
        return "ovmf" if "edk ii" in vendor or "ovmf" in vendor else "uefi"
    if "seabios" in vendor:
        return "seabios"
    if dmi_readable:
        return "bios"
    # No DMI and no EFI: a direct kernel boot (firecracker, qemu -kernel) or a hidden /sys.
    return UNKNOWN


def parse_meminfo(text):
    values = {}
    for line in (text or "").splitlines():
        match = re.match(r"(\w+):\s+(\d+)", line)
        if match:
            values[match.group(1)] = int(match.group(2))
    return values


def parse_thp(text):
    """'always [madvise] never' -> 'madvise'."""
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else UNKNOWN


def parse_os_release(text):
    """os-release(5): ID, VERSION_ID, PRETTY_NAME, and the family the roles key on."""
    values = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip('"')
    os_id = values.get("ID", UNKNOWN)
    return {
        "id": os_id,
        "version_id": values.get("VERSION_ID", UNKNOWN),
        "pretty_name": values.get("PRETTY_NAME", UNKNOWN),
        "family": os_family(os_id, values.get("ID_LIKE", "")),
    }


def os_family(os_id, id_like):
    """The family a package name is chosen by: ID_LIKE lists the related systems most closely
    related first (os-release(5)), so its last entry is the root (ubuntu, linuxmint: debian);
    a system with no ID_LIKE is its own family (debian)."""
    like = id_like.split()
    return like[-1] if like else os_id


def parse_systemd_version(rc, out):
    """`systemctl --version`'s first line, "systemd 252 (252.33-1~deb12u1)" -> 252."""
    match = re.match(r"systemd (\d+)\b", (out or "").lstrip())
    return int(match.group(1)) if rc == 0 and match else None


_IOMMU_FLAG = re.compile(r"^(intel_iommu|amd_iommu|iommu|pcie_acs_override|vfio-pci\.ids)=")


def parse_cmdline_iommu(cmdline):
    flags = [tok for tok in (cmdline or "").split() if _IOMMU_FLAG.match(tok)]
    return {
        "cmdline_flags": flags,
        "acs_override": any(f.startswith("pcie_acs_override=") for f in flags),
    }


# --------------------------------------------------------------------------------------
# collectors


def _dmi(probe, field):
    value = probe.read(f"/sys/class/dmi/id/{field}")
    return value.strip() if value is not None else None


def _nearest_existing(probe, path):
    current = os.path.normpath(path)
    while not probe.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def collect_disk(probe, paths):
    """Free/total GiB on each path, measured on its nearest existing ancestor.

    The model cache dir usually does not exist yet at preflight: the disk it will land on
    is the one that matters.
    """
    disk, unknown = {}, {}
    for path in paths:
        probe_path = _nearest_existing(probe, path)
        try:
            st = probe.statvfs(probe_path)
        except OSError as exc:
            disk[path] = {"probe_path": probe_path, "free_gib": UNKNOWN, "total_gib": UNKNOWN}
            unknown[f"disk.{path}"] = f"statvfs {probe_path}: {exc.strerror or exc}"
            continue
        disk[path] = {
            "probe_path": probe_path,
            "free_gib": (st.f_bavail * st.f_frsize) // 2**30,
            "total_gib": (st.f_blocks * st.f_frsize) // 2**30,
        }
    return disk, unknown


def collect_host(probe, disk_paths=()):
    """Build `gpuhost_host` (docs/facts.md). Missing sources give 'unknown' + reason."""
    unknown = {}
    host = {}

    # Virtualisation: systemd-detect-virt first; the cpuinfo hypervisor flag and DMI as
    # evidence when it is missing (a minimal image, or a microVM with no DMI at all).
    cpuinfo = probe.read("/proc/cpuinfo")
    hypervisor_flag = UNKNOWN
    if cpuinfo is not None:
        hypervisor_flag = bool(re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M))
    else:
        unknown["virt.hypervisor_flag"] = "/proc/cpuinfo not readable"
    product, sys_vendor, bios_vendor = (
        _dmi(probe, "product_name"),
        _dmi(probe, "sys_vendor"),
        _dmi(probe, "bios_vendor"),
    )
    dmi_readable = product is not None or sys_vendor is not None
    if not dmi_readable:
        unknown["virt.q35"] = "/sys/class/dmi/id not readable"
        unknown["virt.product_name"] = "/sys/class/dmi/id not readable"

    virt_type = container = None
    rc, out, err = probe.run(["systemd-detect-virt", "--vm"])
    if rc is None:
        reason = "systemd-detect-virt not found"
        virt_type = _virt_from_evidence(hypervisor_flag, sys_vendor, product)
        if virt_type == UNKNOWN:
            unknown["virt.type"] = reason + (
                "; cpu hypervisor flag set, hypervisor not identified (no DMI)"
                if hypervisor_flag is True
                else ""
            )
        rc2 = None
    else:
        virt_type = parse_detect_virt(rc, out) or UNKNOWN
        if virt_type == UNKNOWN:
            unknown["virt.type"] = f"systemd-detect-virt --vm exited {rc}: {err.strip()}"
        rc2, out2, _err2 = probe.run(["systemd-detect-virt", "--container"])
        container = parse_detect_virt(rc2, out2)
    if container is None:
        container = _container_from_evidence(probe)
        if container == UNKNOWN:
            unknown["virt.container"] = "systemd-detect-virt not usable and no container marker"

    efi_present = probe.exists("/sys/firmware/efi")
    firmware = firmware_kind(efi_present, bios_vendor, dmi_readable)
    if firmware == UNKNOWN:
        unknown["virt.firmware"] = "no DMI and no /sys/firmware/efi (direct kernel boot?)"
    host["virt"] = {
        "type": virt_type,
        "container": container,
        "hypervisor_flag": hypervisor_flag,
        "q35": dmi_q35(product),
        "firmware": firmware,
        "product_name": product if product is not None else UNKNOWN,
        "sys_vendor": sys_vendor if sys_vendor is not None else UNKNOWN,
        "bios_vendor": bios_vendor if bios_vendor is not None else UNKNOWN,
        # Filled by the module from gpuhost_gpu (virtualization_mode of each GPU).
        "gpu_passthrough": UNKNOWN,
    }

    release = probe.read("/proc/sys/kernel/osrelease")
    cmdline = probe.read("/proc/cmdline")
    # Only the flags that matter (iommu.cmdline_flags) are kept from /proc/cmdline: a VM
    # launcher's command line can carry tokens that must not land in the fact cache.
    host["kernel"] = {"release": release.strip() if release else UNKNOWN}
    if release is None:
        unknown["kernel.release"] = "/proc/sys/kernel/osrelease not readable"
    host["os"] = parse_os_release(probe.read("/etc/os-release"))
    if host["os"]["id"] == UNKNOWN:
        unknown["os.id"] = "/etc/os-release not readable or has no ID"
    host["arch"] = probe.machine() or UNKNOWN

    host["secure_boot"] = _secure_boot(probe, efi_present, unknown)
    host["init"] = _init_system(probe, unknown)

    meminfo = parse_meminfo(probe.read("/proc/meminfo"))
    if not meminfo:
        unknown["hugepages"] = "/proc/meminfo not readable"
    thp = parse_thp(probe.read("/sys/kernel/mm/transparent_hugepage/enabled"))
    if thp == UNKNOWN:
        unknown["hugepages.transparent"] = "transparent_hugepage/enabled not readable"
    host["hugepages"] = {
        "total": meminfo.get("HugePages_Total", UNKNOWN),
        "free": meminfo.get("HugePages_Free", UNKNOWN),
        "size_kib": meminfo.get("Hugepagesize", UNKNOWN),
        "transparent": thp,
    }
    host["memory_total_mib"] = meminfo["MemTotal"] // 1024 if "MemTotal" in meminfo else UNKNOWN
    if cpuinfo is not None:
        host["cpu_count"] = len(re.findall(r"^processor\s*:", cpuinfo, re.M)) or UNKNOWN
    else:
        host["cpu_count"] = UNKNOWN
    nodes = probe.listdir("/sys/devices/system/node")
    if nodes is None:
        host["numa_nodes"] = UNKNOWN
        unknown["numa_nodes"] = "/sys/devices/system/node not readable"
    else:
        host["numa_nodes"] = len([n for n in nodes if re.fullmatch(r"node\d+", n)]) or 1

    host["disk"], disk_unknown = collect_disk(probe, disk_paths)
    unknown.update(disk_unknown)

    groups = probe.listdir("/sys/kernel/iommu_groups")
    host["iommu"] = {"groups": len(groups) if groups is not None else UNKNOWN}
    if groups is None:
        unknown["iommu.groups"] = "/sys/kernel/iommu_groups not readable"
    host["iommu"].update(parse_cmdline_iommu(cmdline))
    if cmdline is None:
        unknown["iommu.cmdline_flags"] = "/proc/cmdline not readable"

    ib = probe.listdir("/sys/class/infiniband")
    host["ib_devices"] = ib or []
    host["ib_present"] = bool(ib)

    host["unknown"] = unknown
    return host


def _virt_from_evidence(hypervisor_flag, sys_vendor, product):
    vendor = f"{sys_vendor or ''} {product or ''}".lower()
    if "qemu" in vendor or "kvm" in vendor:
        return "kvm"
    if "vmware" in vendor:
        return "vmware"
    if "microsoft" in vendor:
        return "microsoft"
    if hypervisor_flag is False:
        return "none"
    return UNKNOWN


def _container_from_evidence(probe):
    if probe.exists("/.dockerenv"):
        return "docker"
    if probe.exists("/run/.containerenv"):
        return "podman"
    environ = probe.read_bytes("/proc/1/environ")
    if environ is not None:
        match = re.search(rb"container=(\w+)", environ)
        return match.group(1).decode() if match else "none"
    return UNKNOWN


def _init_system(probe, unknown):
    """Was the host booted with systemd? systemd's own test (sd_booted(3)): the directory
    /run/systemd/system exists. PID 1's name says what runs instead (a container's shell).
    systemd's version (`systemctl --version`) only where it booted the host: a unit's
    directives depend on the systemd that runs it; "n/a" where none does."""
    comm = probe.read("/proc/1/comm")
    pid1 = comm.strip() if comm and comm.strip() else UNKNOWN
    if probe.exists("/run/systemd/system"):
        rc, out, err = probe.run(["systemctl", "--version"])
        version = parse_systemd_version(rc, out)
        if version is None:
            version = UNKNOWN
            unknown["init.systemd_version"] = (
                err.strip() or f"systemctl --version exited {rc}: {(out or '').strip()[:80]}"
            )
        return {"systemd": True, "pid1": pid1, "systemd_version": version}
    if pid1 == UNKNOWN:
        unknown["init.systemd"] = "/run/systemd/system absent and /proc/1/comm not readable"
        unknown["init.systemd_version"] = "not known whether systemd booted the host"
        return {"systemd": UNKNOWN, "pid1": pid1, "systemd_version": UNKNOWN}
    return {"systemd": False, "pid1": pid1, "systemd_version": "n/a"}


def _secure_boot(probe, efi_present, unknown):
    def mokutil():
        rc, out, _err = probe.run(["mokutil", "--sb-state"])
        return out if rc is not None else None

    found = read_secure_boot(probe.read_bytes, efi_present, mokutil)
    if found["state"] == UNKNOWN:
        unknown["secure_boot"] = found["source"]
    return found["state"]


def read_kernel_log(probe):
    """The kernel log (dmesg) for role proxmox_guest's passthrough checks, read by the same
    module call as the facts: (text, "") or (None, why) when it could not be read
    (dmesg_restrict without root, no dmesg); that is a finding of the checks, not an error."""
    rc, out, err = probe.run(["dmesg"])
    if rc == 0:
        return out, ""
    return None, (err or "").strip() or f"dmesg exited {rc}"
