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
  resource mappings), still before any change: unknown mappings, a clique on a mapping that
  passes a whole slot instead of function .0, memory larger than the node, a vmid in use by
  a VM this inventory does not manage.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_pve_schema as schema

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


def desired_config(v):
    """The Proxmox config keys the role manages, as the API returns them (strings)."""
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
    if v.get("proxmox_vm_hugepages"):
        cfg["hugepages"] = str(v["proxmox_vm_hugepages"])
    keys = v.get("proxmox_vm_ssh_keys") or []
    if keys:
        cfg["sshkeys"] = quote("\n".join(keys), safe="")
    cfg.update(hostpci(v))
    return cfg


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
    # hostpciN beyond the spec's GPUs: the spec removed a GPU.
    for key in sorted(current or {}):
        if re.fullmatch(r"hostpci\d+", key) and key not in desired:
            out[key] = {"before": str(current[key]), "after": None}
    return out


def keeper_vmid(v):
    """The vmid of the stopped VM that holds the model disk while the VM is rebuilt."""
    explicit = int(v.get("proxmox_vm_model_keeper_vmid") or 0)
    return explicit or int(v.get("proxmox_vm_vmid") or 0) + 100000


def keeper_name(v):
    return f"{v.get('proxmox_vm_name')}-model"


def _err(var, value, problem, allowed=""):
    text = f"{var}={value!r}: {problem}"
    return text + (f"; allowed: {allowed}" if allowed else "")


def spec_errors(v, facts):
    """Offline refusals, one line each naming the variable. Empty when the spec is valid."""
    errors = []
    vmid = v.get("proxmox_vm_vmid")
    if not isinstance(vmid, int) or isinstance(vmid, bool) or not 100 <= vmid <= 999999999:
        errors.append(_err("proxmox_vm_vmid", vmid, "not a Proxmox VM id", "100 - 999999999"))
    for var in ("proxmox_vm_api_host", "proxmox_vm_node", "proxmox_vm_name"):
        if not v.get(var):
            errors.append(_err(var, v.get(var), "must be set"))
    token = bool(v.get("proxmox_vm_api_token_id"))
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
    hugepages = str(v.get("proxmox_vm_hugepages") or "")
    if hugepages and not _bool(v.get("proxmox_vm_numa", False)):
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
    if args_line(v) and not v.get("proxmox_vm_node_ssh_host"):
        errors.append(
            _err(
                "proxmox_vm_node_ssh_host",
                v.get("proxmox_vm_node_ssh_host"),
                "the spec needs the VM option `args` (proxmox_vm_gpu_clique, "
                "proxmox_vm_mmio64_mib or proxmox_vm_extra_args), which Proxmox lets only "
                "root@pam set: an API token is refused ('only root can set 'args' config'). "
                "Name the Proxmox node's inventory host here so the role sets it with "
                "`qm set --args` over SSH on the node",
                "an inventory host name",
            )
        )
    errors.extend(_schema_errors(v, facts))
    return errors


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
    """Refusals from what the API reports. api: {vms: [cluster/resources type=vm entries],
    node: /nodes entry of proxmox_vm_node or None, mappings: /cluster/mapping/pci list}."""
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
    vmid = v.get("proxmox_vm_vmid")
    tag = v.get("proxmox_vm_managed_tag")
    for vm in api.get("vms") or []:
        if int(vm.get("vmid", -1)) != vmid:
            continue
        tags = re.split(r"[;, ]+", vm.get("tags") or "")
        if vm.get("name") != v.get("proxmox_vm_name") or tag not in tags:
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
        if int(vm.get("vmid", -1)) != keeper or vm.get("name") == keeper_name(v):
            continue
        errors.append(
            _err(
                "proxmox_vm_model_keeper_vmid",
                keeper,
                f"in use by VM {vm.get('name')!r}; the model disk keeper is a VM named "
                f"{keeper_name(v)!r} (0 = proxmox_vm_vmid + 100000)",
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
