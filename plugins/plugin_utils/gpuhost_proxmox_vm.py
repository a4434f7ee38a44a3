# Copyright: gpuhost contributors
# Apache-2.0
"""The GPU VM spec (role proxmox_vm): validation, the Proxmox config it stands for, and the
difference from a VM's current config. Pure; unit-tested in tests/test_proxmox_vm_spec.py.

The spec is the role's variables by name (proxmox_vm_*), so every refusal names the variable
a user typed. Two kinds of checks:

- spec_errors(): offline, before any request: every config value the spec turns into is
  checked against Proxmox's own API schema (gpuhost_pve_schema, data/proxmox/), plus the
  passthrough rules Proxmox's schema cannot state (clique vs hidden=1, args being root-only).
- api_errors(): against what the API reports (cluster resources, the node, the PCI
  resource mappings, storages, the running VMs' configs, the VM, its keeper, the template),
  still before any change: unknown mappings or none on the node, a clique on a mapping that
  passes a whole slot instead of function .0, memory or vCPUs larger than the node, a
  storage missing or without VM images, a missing template, a device a running VM holds, a
  vmid (or keeper vmid) held by a VM this inventory does not manage (vmid, name and tag
  together), a model disk the spec would lose without proxmox_vm_destroy_model_disk.

Each rule Proxmox applies, its source and the request at which Proxmox refuses:
docs/proxmox.md and tests/test_pve_rules.py.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_pve_schema as schema

CONFIG_PATH = "/nodes/{node}/qemu/{vmid}/config"
_TRUE = {"1", "true", "yes", "on"}
# A raw PCI address in proxmox_vm_gpus instead of a mapping id.
_PCI_ADDR = re.compile(r"(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?")
_HUGEPAGE_MIB = {"2": 2, "1024": 1024, "any": 2}


def _bool(value):
    return str(value).lower() in _TRUE if not isinstance(value, bool) else value


def args_line(v):
    """The kvm `args` the spec needs (P2P clique, 64-bit MMIO window, extra), or ''."""
    parts = []
    if _bool(v.get("proxmox_vm_gpu_clique", False)):
        parts += [
            f"-set device.hostpci{i}.x-nv-gpudirect-clique=0"
            for i in range(len(v.get("proxmox_vm_gpus") or []))
        ]
    mmio = int(v.get("proxmox_vm_mmio64_mib") or 0)
    if mmio:
        parts.append(f"-fw_cfg name=opt/ovmf/X-PciMmio64Mb,string={mmio}")
    extra = (v.get("proxmox_vm_extra_args") or "").strip()
    if extra:
        parts.append(extra)
    return " ".join(parts)


def hostpci(v):
    """{'hostpci0': 'mapping=gpu0,pcie=1', ...} for proxmox_vm_gpus."""
    pcie = ",pcie=1" if _bool(v.get("proxmox_vm_gpu_pcie", True)) else ""
    gpus = v.get("proxmox_vm_gpus") or []
    return {f"hostpci{i}": f"mapping={gpu}{pcie}" for i, gpu in enumerate(gpus)}


def desired_config(v, placement=None):
    """The Proxmox config keys the role manages through the API token, as the API returns
    them (strings). The root-only keys are root_config(); placement: gpuhost_proxmox_placement
    .decide()'s answer, whose `config` (numa, numaN) is merged in."""
    placed = placement or {}
    cfg = {
        "name": v["proxmox_vm_name"],
        "cpu": v["proxmox_vm_cpu"],
        "sockets": str(v["proxmox_vm_sockets"]),
        "cores": str(v["proxmox_vm_cores"]),
        "memory": str(v["proxmox_vm_memory_mib"]),
        # Passed-through GPUs pin all guest memory: a balloon cannot take any back.
        "balloon": "0",
        "numa": "1" if _bool(v["proxmox_vm_numa"]) else "0",
        "machine": v["proxmox_vm_machine"],
        "bios": v["proxmox_vm_bios"],
        "agent": "1" if _bool(v["proxmox_vm_agent"]) else "0",
        "ciuser": v["proxmox_vm_ci_user"],
        "ipconfig0": v["proxmox_vm_ipconfig0"],
        "tags": v["proxmox_vm_managed_tag"],
    }
    keys = v.get("proxmox_vm_ssh_keys") or []
    if keys:
        cfg["sshkeys"] = quote("\n".join(keys), safe="")
    cfg.update(hostpci(v))
    cfg.update(placed.get("config") or {})
    return cfg


# VM options qemu-server lets only root@pam set: they are in none of the privilege classes of
# PVE/API2/Qemu.pm check_vm_modify_config_perm ($cpuoptions, $memoryoptions, $hwtypeoptions,
# $generaloptions, ...), which dies "only root can set '%s' config" for them, API tokens
# included. The role sets them with `qm set` as root on the node (proxmox_vm_node_ssh_host).
ROOT_KEYS = ("args", "affinity", "hugepages")
SRC_ROOT = (
    "qemu-server PVE/API2/Qemu.pm check_vm_modify_config_perm, 'only root can set '%s' config'"
)


def root_config(v, placement=None):
    """{key: value} of the root-only keys the spec sets ('' for args: none). With placement
    auto, affinity and hugepages are its decision (hugepages None: delete it)."""
    placed = placement or {}
    out = {}
    if args_line(v):
        out["args"] = args_line(v)
    if placed.get("mode") == "auto":
        out.update(placed.get("root") or {})
    elif v.get("proxmox_vm_hugepages"):
        out["hugepages"] = str(v["proxmox_vm_hugepages"])
    return out


def root_argv(v, placement, current):
    """The `qm set VMID` options that bring the root-only keys to the spec, [] when none
    differs: `--KEY VALUE` each, `--delete a,b` for what placement removes. Values are the
    spec's checked args, a cpu list and a hugepage size: argv words, never a shell."""
    current = current or {}
    argv, delete = [], []
    for key, want in sorted(root_config(v, placement).items()):
        have = current.get(key)
        if want is None:
            if have is not None:
                delete.append(key)
        elif str(have) != str(want):
            argv += [f"--{key}", str(want)]
    return argv + (["--delete", ",".join(delete)] if delete else [])


def _norm(key, value):
    if value is None:
        return None
    text = str(value)
    if key == "sshkeys":
        return unquote(text).strip()
    if key == "tags":
        return ";".join(sorted(t for t in re.split(r"[;, ]+", text) if t))
    if "=" in text or "," in text:
        # property strings: order of keys does not matter to Proxmox
        return tuple(sorted(text.split(",")))
    return text


def config_diff(desired, current):
    """{key: {'before': current or None, 'after': desired}} for keys that differ."""
    out = {}
    for key, want in desired.items():
        have = (current or {}).get(key)
        if _norm(key, want) != _norm(key, have):
            out[key] = {"before": None if have is None else str(have), "after": want}
    # hostpciN beyond the spec's GPUs: the spec removed a GPU; numaN beyond placement's nodes.
    stale = r"hostpci\d+|numa\d+" if "numa0" in desired else r"hostpci\d+"
    for key in sorted(current or {}):
        if re.fullmatch(stale, key) and key not in desired:
            out[key] = {"before": str(current[key]), "after": None}
    return out


def keeper_vmid(v):
    """The vmid of the stopped VM that holds the model disk while the VM is rebuilt."""
    explicit = int(v.get("proxmox_vm_model_keeper_vmid") or 0)
    return explicit or int(v.get("proxmox_vm_vmid") or 0) + 100000


def keeper_name(v):
    return f"{v.get('proxmox_vm_name')}-model"


def _err(var, value, problem, allowed="", source=""):
    text = f"{var}={value!r}: {problem}"
    text += f"; allowed: {allowed}" if allowed else ""
    return text + (f" [Proxmox: {source}]" if source else "")


# Where each rule that Proxmox applies beyond its API schema comes from (docs/proxmox.md).
SRC_Q35 = (
    "qemu-server PVE/QemuServer/PCI.pm parse_hostpci_devices, 'q35 machine model is not enabled'"
)
SRC_VCPUS = (
    "qemu-server PVE/QemuServer.pm config_to_command, 'MAX %d vcpus allowed per VM on this node'"
)
SRC_PCI_USE = (
    "qemu-server PVE/QemuServer/PCI.pm reserve_pci_usage, "
    "\"PCI device '%s' already in use by VMID '%d'\" (at start)"
)
SRC_STORAGE = (
    "pve-storage PVE/Storage.pm storage_config/storage_check_enabled and qemu-server "
    "PVE/API2/Qemu.pm check_storage_access, 'does not support vm images'"
)
SRC_CLONE = "qemu-server PVE/API2/Qemu.pm clone_vm (the source VM must exist)"
SRC_MEMORY = "the node's memory (/nodes maxmem): passed-through GPUs pin all guest memory at start"
SRC_VMID = "qemu-server PVE/API2/Qemu.pm create_vm/clone_vm, 'VM %d already exists'"
_DISK_SLOT = re.compile(r"(scsi|virtio|sata|ide)\d+")
# qemu-server PVE/QemuServer/Drive.pm $MAX_SCSI_DISKS, $MAX_VIRTIO_DISKS, $MAX_SATA_DISKS,
# $MAX_IDE_DISKS: the schema defines scsi0-30, virtio0-15, sata0-5, ide0-3.
_DISK_SLOTS = {"scsi": 31, "virtio": 16, "sata": 6, "ide": 4}
_SIZE = re.compile(r"(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)")


def is_q35(machine):
    """PVE/QemuServer/Machine.pm machine_type_is_q35: the machine type matches /q35/."""
    return "q35" in str(machine or "")


def _api_host_error(v):
    host = str(v.get("proxmox_vm_api_host") or "")
    if "://" in host or "/" in host:
        return _err(
            "proxmox_vm_api_host",
            host,
            "a URL: the Proxmox API is always https; give the host name or address only "
            "(the port is proxmox_vm_api_port)",
            "a host name or IP address, e.g. 192.0.2.10",
        )
    return None


def spec_errors(v, facts):
    """Offline refusals, one line each naming the variable. Empty when the spec is valid."""
    errors = []
    vmid = v.get("proxmox_vm_vmid")
    if not isinstance(vmid, int) or isinstance(vmid, bool) or not 100 <= vmid <= 999999999:
        errors.append(_err("proxmox_vm_vmid", vmid, "not a Proxmox VM id", "100 - 999999999"))
    for var in ("proxmox_vm_api_host", "proxmox_vm_node", "proxmox_vm_name"):
        if not v.get(var):
            errors.append(_err(var, v.get(var), "must be set"))
    bad_host = _api_host_error(v) if v.get("proxmox_vm_api_host") else None
    if bad_host:
        errors.append(bad_host)
    token = bool(v.get("proxmox_vm_api_token_id"))
    if token and not v.get("proxmox_vm_api_token_secret"):
        errors.append(
            _err(
                "proxmox_vm_api_token_secret",
                "",
                f"empty, but proxmox_vm_api_token_id={v.get('proxmox_vm_api_token_id')!r} is "
                "set: put the secret in Ansible Vault or GPUHOST_PROXMOX_TOKEN_SECRET; the API "
                "was not contacted",
            )
        )
    if not token and not v.get("proxmox_vm_api_password"):
        errors.append(
            _err(
                "proxmox_vm_api_token_id",
                v.get("proxmox_vm_api_token_id"),
                "no credentials: set an API token (id + proxmox_vm_api_token_secret) or "
                "proxmox_vm_api_password",
            )
        )
    gpus = v.get("proxmox_vm_gpus") or []
    for i, gpu in enumerate(gpus):
        if _PCI_ADDR.fullmatch(str(gpu)):
            errors.append(
                _err(
                    f"proxmox_vm_gpus[{i}]",
                    gpu,
                    "a raw PCI address: Proxmox lets only root@pam pass a device by address "
                    "(API tokens are refused); create a PCI resource mapping for the GPU on the "
                    "node (Datacenter > Resource Mappings, or pvesh create /cluster/mapping/pci) "
                    "and give its id here",
                    "PCI resource mapping ids",
                )
            )
    if len(set(gpus)) != len(gpus):
        errors.append(_err("proxmox_vm_gpus", gpus, "a mapping listed twice"))
    if len(gpus) > 16:
        errors.append(_err("proxmox_vm_gpus", gpus, "more than 16 devices", "hostpci0-15"))
    cpu = schema.parse_property_string(v.get("proxmox_vm_cpu") or "", "cputype")
    clique = _bool(v.get("proxmox_vm_gpu_clique", False))
    if clique and str(cpu.get("hidden", "0")).lower() in _TRUE:
        errors.append(
            _err(
                "proxmox_vm_cpu",
                v.get("proxmox_vm_cpu"),
                "hidden=1 together with proxmox_vm_gpu_clique: the GPUDirect clique is for "
                "the NVIDIA driver in a guest that knows it is a VM; hiding the hypervisor "
                "breaks the P2P setup. Remove hidden=1",
            )
        )
    if clique and len(gpus) < 2:
        errors.append(
            _err("proxmox_vm_gpu_clique", True, "a P2P clique needs two GPUs or more", "false")
        )
    if (
        gpus
        and _bool(v.get("proxmox_vm_gpu_pcie", True))
        and not is_q35(v.get("proxmox_vm_machine"))
    ):
        errors.append(
            _err(
                "proxmox_vm_machine",
                v.get("proxmox_vm_machine"),
                "proxmox_vm_gpu_pcie passes the GPUs as PCIe (pcie=1), which Proxmox refuses at "
                "start on a machine type that is not q35",
                "q35 (or pc-q35-<version>), or proxmox_vm_gpu_pcie: false",
                SRC_Q35,
            )
        )
    errors.extend(_model_disk_shape_errors(v, facts))
    hugepages = str(v.get("proxmox_vm_hugepages") or "")
    auto = v.get("proxmox_vm_placement") == "auto"
    if hugepages and not auto and not _bool(v.get("proxmox_vm_numa", False)):
        errors.append(
            _err(
                "proxmox_vm_hugepages",
                hugepages,
                "Proxmox needs NUMA on for hugepages",
                "set proxmox_vm_numa: true, or hugepages ''",
            )
        )
    mem = v.get("proxmox_vm_memory_mib")
    if hugepages in _HUGEPAGE_MIB and isinstance(mem, int) and mem % _HUGEPAGE_MIB[hugepages]:
        errors.append(
            _err(
                "proxmox_vm_memory_mib",
                mem,
                f"not a multiple of the {hugepages} MiB hugepage size",
            )
        )
    needs_root = sorted(root_config(v)) + (["affinity"] if auto else [])
    if needs_root and not v.get("proxmox_vm_node_ssh_host"):
        why = {
            "args": "`args` (proxmox_vm_gpu_clique, proxmox_vm_mmio64_mib or "
            "proxmox_vm_extra_args)",
            "hugepages": "`hugepages` (proxmox_vm_hugepages)",
            "affinity": "`affinity` and `hugepages` (proxmox_vm_placement: auto)",
        }
        errors.append(
            _err(
                "proxmox_vm_node_ssh_host",
                v.get("proxmox_vm_node_ssh_host"),
                "the spec needs the VM option "
                + ", ".join(why[k] for k in needs_root)
                + ", which Proxmox lets only root@pam set: an API token is refused ('only "
                f"root can set '{needs_root[0]}' config'). Name the Proxmox node's inventory "
                "host here so the role sets them with `qm set` over SSH on the node",
                "an inventory host name",
                SRC_ROOT,
            )
        )
    errors.extend(_schema_errors(v, facts))
    return errors


def _model_disk_shape_errors(v, facts):
    disk = v.get("proxmox_vm_model_disk")
    if not isinstance(disk, dict):
        return [_err("proxmox_vm_model_disk", disk, "not a dict", "{slot, storage, size_gib}")]
    size = disk.get("size_gib")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return [
            _err("proxmox_vm_model_disk.size_gib", size, "not a size in GiB", "0 (none) or more")
        ]
    if not size:
        return []
    slot = str(disk.get("slot") or "")
    match = _DISK_SLOT.fullmatch(slot)
    if not match or int(slot[len(match.group(1)) :]) >= _DISK_SLOTS[match.group(1)]:
        return [
            _err(
                "proxmox_vm_model_disk.slot",
                slot,
                "not a VM disk slot",
                "scsi0-30, virtio0-15, sata0-5, ide0-3",
            )
        ]
    value = f"{disk.get('storage')}:{size}"
    refused = schema.check_params(
        facts, CONFIG_PATH, "POST", {"node": "n", "vmid": "100", slot: value}
    )
    return [
        _err(
            "proxmox_vm_model_disk.slot" if key == slot else f"proxmox_vm_model_disk({key})",
            disk.get("slot") if key == slot else value,
            f"Proxmox's API schema refuses {key}={value!r}: {message.strip()}",
            "scsi0-30, virtio0-15, sata0-5, ide0-3" if key == slot else "",
        )
        for key, message in sorted(refused.items())
    ]


# Which variable a config key comes from, for the error message.
_VAR_OF = {
    "name": "proxmox_vm_name",
    "cpu": "proxmox_vm_cpu",
    "sockets": "proxmox_vm_sockets",
    "cores": "proxmox_vm_cores",
    "memory": "proxmox_vm_memory_mib",
    "numa": "proxmox_vm_numa",
    "hugepages": "proxmox_vm_hugepages",
    "machine": "proxmox_vm_machine",
    "bios": "proxmox_vm_bios",
    "agent": "proxmox_vm_agent",
    "ciuser": "proxmox_vm_ci_user",
    "ipconfig0": "proxmox_vm_ipconfig0",
    "sshkeys": "proxmox_vm_ssh_keys",
    "tags": "proxmox_vm_managed_tag",
    "node": "proxmox_vm_node",
    "vmid": "proxmox_vm_vmid",
    "efidisk0": "proxmox_vm_efidisk_storage",
}


def _schema_errors(v, facts):
    try:
        cfg = desired_config(v)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"proxmox_vm spec incomplete: {exc}"]
    params = dict(cfg, node=v.get("proxmox_vm_node") or "", vmid=str(v.get("proxmox_vm_vmid")))
    params.update({k: x for k, x in root_config(v).items() if k != "args"})
    storage = v.get("proxmox_vm_efidisk_storage")
    if storage:
        params["efidisk0"] = efidisk0(v)
    errors = []
    for key, message in sorted(schema.check_params(facts, CONFIG_PATH, "POST", params).items()):
        var = _VAR_OF.get(key)
        if var is None and key.startswith("hostpci"):
            var = f"proxmox_vm_gpus[{int(key[7:])}]"
        shown = v.get(var.split("[")[0]) if var else params.get(key)
        errors.append(
            f"{var or key}={shown!r}: Proxmox's API schema ({facts.get('pve_version')}) "
            f"refuses {key}={params.get(key)!r}: {message.strip()}"
        )
    return errors


def efidisk0(v):
    # Pre-enrolled keys off: Secure Boot stays off, so the unsigned DKMS driver loads.
    return f"{v['proxmox_vm_efidisk_storage']}:1,efitype=4m,pre-enrolled-keys=0"


def api_errors(v, api):
    """Every refusal from the node's live state, before anything changes (a rebuild: before
    the drain and the destroy). api (plugins/modules/proxmox_facts.py): {vms: cluster/
    resources type=vm entries, node: the /nodes entry of proxmox_vm_node or None, mappings:
    /cluster/mapping/pci, storages: cluster/resources type=storage entries, configs: {vmid:
    config} of the running VMs on the node, current: the VM's config or None, keeper: the
    keeper VM's config or None, template: the template's config or None, purpose: create,
    rebuild or destroy}. A destroy checks only which VM it destroys and the model disk."""
    purpose = api.get("purpose", "create")
    errors = _identity_errors(v, api) + _model_disk_errors(v, api)
    if purpose == "destroy":
        return errors
    errors += _base_api_errors(v, api)
    errors += _node_errors(v, api, clone=purpose == "rebuild" or not api.get("current"))
    return errors


def _base_api_errors(v, api):
    errors = []
    node_name = v.get("proxmox_vm_node")
    node = api.get("node")
    if node is None:
        errors.append(_err("proxmox_vm_node", node_name, "no such node in the cluster"))
    else:
        maxmem = int(node.get("maxmem") or 0)
        want = int(v.get("proxmox_vm_memory_mib") or 0) * 1024 * 1024
        if maxmem and want > maxmem:
            errors.append(
                _err(
                    "proxmox_vm_memory_mib",
                    v.get("proxmox_vm_memory_mib"),
                    f"more than node {node_name} has ({maxmem // (1024 * 1024)} MiB)",
                    f"<= {maxmem // (1024 * 1024)}",
                )
            )
    mappings = {m.get("id"): m for m in api.get("mappings") or []}
    clique = _bool(v.get("proxmox_vm_gpu_clique", False))
    for i, gpu in enumerate(v.get("proxmox_vm_gpus") or []):
        mapping = mappings.get(gpu)
        if mapping is None:
            errors.append(
                _err(
                    f"proxmox_vm_gpus[{i}]",
                    gpu,
                    "no such PCI resource mapping",
                    ", ".join(sorted(str(k) for k in mappings)) or "(none defined)",
                )
            )
            continue
        paths = [
            entry.get("path", "")
            for entry in (schema.parse_property_string(m) for m in mapping.get("map") or [])
            if entry.get("node") == node_name
        ]
        if not paths:
            errors.append(
                _err(f"proxmox_vm_gpus[{i}]", gpu, f"the mapping has no device on {node_name}")
            )
        elif clique and not all(p.endswith(".0") for p in paths):
            errors.append(
                _err(
                    f"proxmox_vm_gpus[{i}]",
                    gpu,
                    f"maps {', '.join(paths)}: with proxmox_vm_gpu_clique every GPU must be "
                    "passed as its function .0 (a whole slot becomes hostpciN.0/.1 and the "
                    "clique's `-set device.hostpciN` names no device); map <slot>.0",
                )
            )
    return errors


def _tags(text):
    return [t for t in re.split(r"[;, ]+", text or "") if t]


def _identity_errors(v, api):
    """The VM is identified by vmid, name and tag together (a vmid held by another VM is
    never touched), and so is its keeper."""
    errors = []
    vmid = v.get("proxmox_vm_vmid")
    tag = v.get("proxmox_vm_managed_tag")
    for vm in api.get("vms") or []:
        if int(vm.get("vmid", -1)) != vmid:
            continue
        if vm.get("name") != v.get("proxmox_vm_name") or tag not in _tags(vm.get("tags")):
            errors.append(
                _err(
                    "proxmox_vm_vmid",
                    vmid,
                    f"in use by VM {vm.get('name')!r} on {vm.get('node')} that this inventory "
                    f"does not manage (a managed VM has name {v.get('proxmox_vm_name')!r} and "
                    f"tag {tag!r}); pick a free vmid",
                )
            )
    keeper = keeper_vmid(v)
    for vm in api.get("vms") or []:
        if int(vm.get("vmid", -1)) != keeper:
            continue
        if vm.get("name") == keeper_name(v) and tag in _tags(vm.get("tags")):
            continue
        errors.append(
            _err(
                "proxmox_vm_model_keeper_vmid",
                keeper,
                f"in use by VM {vm.get('name')!r}; the model disk keeper is a VM named "
                f"{keeper_name(v)!r} with tag {tag!r} (0 = proxmox_vm_vmid + 100000)",
            )
        )
    return errors


def _storage_errors(v, api):
    node = v.get("proxmox_vm_node")
    want = []
    if v.get("proxmox_vm_bios") == "ovmf" and v.get("proxmox_vm_efidisk_storage"):
        want.append(("proxmox_vm_efidisk_storage", v["proxmox_vm_efidisk_storage"]))
    disk = v.get("proxmox_vm_model_disk") or {}
    if int(disk.get("size_gib") or 0) > 0:
        want.append(("proxmox_vm_model_disk.storage", disk.get("storage")))
    if v.get("proxmox_vm_clone_storage"):
        want.append(("proxmox_vm_clone_storage", v["proxmox_vm_clone_storage"]))
    on_node = {s.get("storage"): s for s in api.get("storages") or [] if s.get("node") == node}
    errors = []
    for var, name in want:
        entry = on_node.get(name)
        usable = sorted(
            k
            for k, s in on_node.items()
            if "images" in str(s.get("content", "")).split(",") and s.get("status") == "available"
        )
        allowed = ", ".join(usable) or "(none on this node)"
        if entry is None:
            problem = f"no storage {name!r} on node {node}"
        elif entry.get("status") != "available":
            problem = f"storage {name!r} is not available on node {node} ({entry.get('status')})"
        elif "images" not in str(entry.get("content", "")).split(","):
            problem = f"storage {name!r} does not hold VM disks (content {entry.get('content')!r})"
        else:
            continue
        errors.append(_err(var, name, problem, allowed, SRC_STORAGE))
    return errors


def _hostpci_users(api, node, gpu, paths, own):
    """Running VMs on node (other than own) whose hostpci names the mapping or its device."""
    users = []
    for vmid, cfg in sorted((api.get("configs") or {}).items()):
        if int(vmid) in own:
            continue
        for key, value in sorted((cfg or {}).items()):
            if not re.fullmatch(r"hostpci\d+", key):
                continue
            dev = schema.parse_property_string(str(value), "host")
            host = str(dev.get("host") or "").lower()
            host = host if host.count(":") >= 2 or not host else "0000:" + host
            if dev.get("mapping") == gpu or any(
                h and (p.lower() == h or p.lower().startswith(h + ".") or h.startswith(p.lower()))
                for p in paths
                for h in host.split(";")
            ):
                users.append(int(vmid))
    return users


def _node_errors(v, api, clone):
    """What qemu-server checks at create or start against the node's live state."""
    errors = []
    node = api.get("node") or {}
    name = v.get("proxmox_vm_node")
    maxcpu = int(node.get("maxcpu") or 0)
    try:
        vcpus = int(v.get("proxmox_vm_sockets") or 1) * int(v.get("proxmox_vm_cores") or 1)
    except (TypeError, ValueError):
        vcpus = 0
    if maxcpu and vcpus > maxcpu:
        errors.append(
            _err(
                "proxmox_vm_cores",
                v.get("proxmox_vm_cores"),
                f"proxmox_vm_sockets x proxmox_vm_cores = {vcpus} vCPUs, more than node {name} "
                f"has ({maxcpu}); Proxmox refuses the start",
                f"sockets x cores <= {maxcpu}",
                SRC_VCPUS,
            )
        )
    errors += _storage_errors(v, api)
    vmid, keeper = v.get("proxmox_vm_vmid"), keeper_vmid(v)
    for vm in api.get("vms") or []:
        if vm.get("name") == v.get("proxmox_vm_name") and int(vm.get("vmid", -1)) != vmid:
            errors.append(
                _err(
                    "proxmox_vm_name",
                    v.get("proxmox_vm_name"),
                    f"also the name of VM {vm.get('vmid')} on {vm.get('node')}: the VM is "
                    "identified by vmid, name and tag together; pick a unique name",
                )
            )
    if clone:
        errors += _template_errors(v, api)
    mappings = {m.get("id"): m for m in api.get("mappings") or []}
    for i, gpu in enumerate(v.get("proxmox_vm_gpus") or []):
        paths = [
            entry.get("path", "")
            for entry in (
                schema.parse_property_string(m) for m in (mappings.get(gpu) or {}).get("map") or []
            )
            if entry.get("node") == name
        ]
        users = _hostpci_users(api, name, gpu, paths, {vmid, keeper})
        if users:
            errors.append(
                _err(
                    f"proxmox_vm_gpus[{i}]",
                    gpu,
                    f"its device ({', '.join(paths) or '?'}) is in use by running VM "
                    f"{', '.join(map(str, users))} on {name}; Proxmox refuses the start",
                    "a mapping no running VM on the node uses, or stop that VM first",
                    SRC_PCI_USE,
                )
            )
    return errors


def _template_errors(v, api):
    want = v.get("proxmox_vm_template")
    found = [vm for vm in api.get("vms") or [] if vm.get("name") == want]
    templates = sorted(str(vm.get("name")) for vm in api.get("vms") or [] if vm.get("template"))
    allowed = ", ".join(templates) or "(no template in the cluster)"
    if not found:
        return [
            _err(
                "proxmox_vm_template", want, "no VM of that name in the cluster", allowed, SRC_CLONE
            )
        ]
    if len(found) > 1:
        ids = ", ".join(str(vm.get("vmid")) for vm in found)
        return [_err("proxmox_vm_template", want, f"the name of several VMs ({ids})", allowed)]
    if not int(found[0].get("template") or 0):
        return [
            _err(
                "proxmox_vm_template",
                want,
                f"VM {found[0].get('vmid')} is not a template (a rebuild would clone a live VM)",
                allowed,
            )
        ]
    disk = v.get("proxmox_vm_model_disk") or {}
    slot = disk.get("slot")
    if int(disk.get("size_gib") or 0) > 0 and slot in (api.get("template") or {}):
        return [
            _err(
                "proxmox_vm_model_disk.slot",
                slot,
                f"the template {want!r} already has a disk there ({api['template'][slot]})",
                "a slot the template leaves free",
            )
        ]
    return []


def _size_gib(value):
    match = _SIZE.search(str(value))
    if not match:
        return None
    scale = {"": 1 / 1024**3, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1, "T": 1024}[match.group(2)]
    return float(match.group(1)) * scale


def _data_disks(config, template):
    """{slot: value} of the disks on a VM that the template did not bring (the model disk)."""
    return {
        k: val
        for k, val in (config or {}).items()
        if _DISK_SLOT.fullmatch(k)
        and k not in (template or {})
        and "media=cdrom" not in str(val)
        and "cloudinit" not in str(val)
    }


def _model_disk_errors(v, api):
    """A spec change never loses the model disk: when the disk that exists (on the VM or
    parked on its keeper) cannot be kept as the spec says, refuse naming the field, unless
    proxmox_vm_destroy_model_disk (--delete-model-disk) says to destroy it."""
    if _bool(v.get("proxmox_vm_destroy_model_disk", False)):
        return []
    disk = v.get("proxmox_vm_model_disk") or {}
    size = int(disk.get("size_gib") or 0) if isinstance(disk.get("size_gib"), int) else 0
    slot, storage = disk.get("slot"), disk.get("storage")
    template = api.get("template")
    if template is None:
        template = {"scsi0": "", "efidisk0": ""}
    errors = []
    for where, cfg in (("the VM", api.get("current")), ("its keeper VM", api.get("keeper"))):
        have = _data_disks(cfg, template)
        if not have:
            continue
        listed = ", ".join(f"{k}: {x}" for k, x in sorted(have.items()))
        hint = "or pass --delete-model-disk (proxmox_vm_destroy_model_disk) to destroy it"
        if not size:
            errors.append(
                _err(
                    "proxmox_vm_model_disk.size_gib",
                    0,
                    f"{where} has a model disk ({listed}) "
                    f"that size 0 would destroy; set its size, {hint}",
                )
            )
            continue
        if slot not in have:
            errors.append(
                _err(
                    "proxmox_vm_model_disk.slot",
                    slot,
                    f"{where} has its model disk on {', '.join(sorted(have))}; a rebuild keeps a "
                    f"disk only on the same slot: set the slot back, {hint}",
                    ", ".join(sorted(have)),
                )
            )
            continue
        value = str(have[slot])
        on = value.split(":", 1)[0]
        if on != storage:
            errors.append(
                _err(
                    "proxmox_vm_model_disk.storage",
                    storage,
                    f"the model disk of {where} is on storage {on!r}; keeping it keeps its "
                    f"storage: set it back, {hint}",
                    on,
                )
            )
        gib = _size_gib(value)
        if gib is not None and abs(gib - size) > 0.01:
            errors.append(
                _err(
                    "proxmox_vm_model_disk.size_gib",
                    size,
                    f"the model disk of {where} is {gib:g} GiB; a kept disk keeps its size: "
                    f"set it back (grow it on the node with qm disk resize first), {hint}",
                    f"{gib:g}",
                )
            )
    return errors
