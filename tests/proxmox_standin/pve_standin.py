#!/usr/bin/env python3
# Copyright: gpuhost contributors
# Apache-2.0
"""A Proxmox VE API stand-in: a TEST DOUBLE, not Proxmox.

There is no Proxmox node on the machines gpuhost is tested on, so this small HTTPS server
speaks the part of `/api2/json` that the community.proxmox modules (through proxmoxer) and
gpuhost's own facts module call: ticket and API-token auth, /version, /nodes, nextid,
cluster resources, PCI resource mappings, node qemu list/create/config/status/start/stop/
shutdown/delete, clone, resize, unlink, and task status/log by UPID. Tasks finish at once.

What makes it worth testing against: EVERY request is checked against the facts copied from
Proxmox's own API schema (data/proxmox/pve-api-9.1.3.json, via gpuhost_pve_schema) before it
is served. An unknown or malformed parameter gets the 400 "Parameter verification failed."
with Proxmox's per-parameter `errors`; a call the schema's permission check refuses gets the
403 "Permission check failed (...)"; a root-only VM option (`args`, raw `hostpciN: host=`)
from anyone but root@pam (an API token included) gets the plain 500 "only root can set ..."
that qemu-server's check_vm_modify_config_perm dies with (data/proxmox/SOURCE.md). Every
request and its status is kept in `log` so tests can show the project sent no bad request.

It listens on loopback only, with a self-signed certificate made at start. Run it alone with
`python tests/proxmox_standin/pve_standin.py --port 18601` (prints the token to use).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import importlib.util
import ipaddress
import json
import os
import re
import ssl
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _load_schema():
    """The schema checker as collection code; run as a script, loaded by its path."""
    try:
        from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_pve_schema

        return gpuhost_pve_schema
    except ImportError:
        path = os.path.join(_ROOT, "plugins", "plugin_utils", "gpuhost_pve_schema.py")
        spec = importlib.util.spec_from_file_location("gpuhost_pve_schema", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


schema = _load_schema()

ROOT_USER = "root@pam"
_DISK = re.compile(r"(ide|sata|scsi|virtio|efidisk|tpmstate|unused)\d+")
# Config keys by the privilege qemu-server checks for them (check_vm_modify_config_perm);
# anything else is root-only. Only the keys gpuhost uses, plus their neighbours. `affinity`,
# `hugepages` and `keephugepages` are in none of its classes ($cpuoptions, $memoryoptions,
# $hwtypeoptions, $generaloptions in PVE/API2/Qemu.pm, qemu-server 9.2.6), so Proxmox answers
# an API token "only root can set 'affinity' config": root-only here too.
_PRIV_OF = {
    "VM.Config.CPU": {"cpu", "sockets", "cores", "vcpus", "cpulimit", "cpuunits"},
    "VM.Config.Memory": {"memory", "balloon", "shares"},
    "VM.Config.HWType": {"machine", "bios", "scsihw", "vga"},
    "VM.Config.Options": {"name", "onboot", "ostype", "description", "boot", "tags", "agent"},
    "VM.Config.Cloudinit": {"ciuser", "cipassword", "sshkeys", "citype", "nameserver"},
}


# How many of each indexed VM option qemu-server defines (hostpci0-15, scsi0-30, ...): its
# schema has one key per index, which data/proxmox/ keeps as one `name[n]` entry. From
# qemu-server PVE/QemuServer/PCI.pm ($MAX_HOSTPCI_DEVICES), PVE/QemuServer/Drive.pm
# ($MAX_SCSI_DISKS, $MAX_VIRTIO_DISKS, $MAX_SATA_DISKS, $MAX_IDE_DISKS), PVE/QemuServer.pm
# ($MAX_NETS, $MAX_SERIAL_PORTS) and PVE/QemuServer/Memory.pm ($MAX_NUMA).
_INDEX_LIMITS = {
    "hostpci": 16,
    "scsi": 31,
    "virtio": 16,
    "sata": 6,
    "ide": 4,
    "net": 32,
    "ipconfig": 32,
    "serial": 4,
    "numa": 8,
}


def _index_errors(params):
    """PVE::JSONSchema's refusal of a key the schema does not define (hostpci16, scsi31)."""
    out = {}
    for key in params:
        match = re.fullmatch(r"([a-z]+)(\d+)", key)
        limit = _INDEX_LIMITS.get(match.group(1)) if match else None
        if limit is not None and int(match.group(2)) >= limit:
            out[key] = (
                "property is not defined in schema and the schema does not allow "
                "additional properties"
            )
    return out


def make_cert(directory):
    """A self-signed certificate for 127.0.0.1 (cryptography ships with ansible-core)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pve-standin")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


class ApiError(Exception):
    def __init__(self, status, reason, errors=None):
        super().__init__(reason)
        self.status, self.reason, self.errors = status, reason, errors


def default_state():
    """One node with 64 GiB, a cloud-image template 9000, two GPU mappings, an unmanaged VM."""
    gpu_map = "id=10de:2bb5,iommugroup={g},node=pve1,path=0000:{b:02x}:00.0"
    return {
        "nodes": {"pve1": {"maxmem": 64 * 1024**3, "maxcpu": 32}},
        "mappings": [
            {"id": f"gpu{i}", "map": [gpu_map.format(g=20 + i, b=1 + i)], "description": ""}
            for i in range(2)
        ],
        "vms": {
            "9000": {
                "node": "pve1",
                "status": "stopped",
                "template": 1,
                "config": {
                    "name": "debian-12-cloud",
                    "template": "1",
                    "memory": "2048",
                    "cores": "2",
                    "bios": "ovmf",
                    "machine": "q35",
                    "scsihw": "virtio-scsi-single",
                    "scsi0": "local-lvm:base-9000-disk-0,size=3G",
                    "efidisk0": "local-lvm:base-9000-disk-1,efitype=4m,pre-enrolled-keys=0,size=4M",
                    "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
                    "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
                    "boot": "order=scsi0",
                    "serial0": "socket",
                },
            },
            "150": {
                "node": "pve1",
                "status": "running",
                "config": {"name": "db", "memory": "4096", "cores": "2"},
            },
        },
        # storage.cfg: id -> the nodes it is enabled on and its content types
        "storages": {
            "local-lvm": {"nodes": ["pve1"], "content": ["images", "rootdir"], "disable": False},
            "local": {"nodes": ["pve1"], "content": ["iso", "vztmpl", "backup"], "disable": False},
        },
        "volumes": {},
        # API tokens: "user@realm!name" -> secret and the privileges it holds on /
        "tokens": {},
        "passwords": {},
    }


def _numa_refusal(cfg, node):
    """qemu-server PVE/QemuServer/Memory.pm config, for a VM with numa=1 and numaN entries:
    "missing NUMA node%d memory value", "missing NUMA node%d cpus", "you need to define a
    policy for hostnode %s", "numa hostnodes need to be defined to use hugepages", "host NUMA
    node%d doesn't exist" (print_numa_hostnodes, against the node's NUMA nodes: `numa_nodes`
    in the stand-in's node, 1 when not given), "total memory for NUMA nodes must be equal to
    vm static memory"; hugepages_size: "Memory size %d is not a multiple of the requested
    hugepages size %d"."""
    if str(cfg.get("numa", "0")).lower() not in ("1", "true", "on"):
        return None
    total, host_nodes = 0, int(node.get("numa_nodes", 1))
    for i in range(_INDEX_LIMITS["numa"]):
        if f"numa{i}" not in cfg:
            continue
        numa = schema.parse_property_string(cfg[f"numa{i}"])
        if not numa.get("memory"):
            return f"missing NUMA node{i} memory value"
        if numa.get("cpus") is None:
            return f"missing NUMA node{i} cpus"
        total += int(float(numa["memory"]))
        hostnodes = numa.get("hostnodes")
        if hostnodes is None:
            if cfg.get("hugepages"):
                return "numa hostnodes need to be defined to use hugepages"
            continue
        if not numa.get("policy"):
            return f"you need to define a policy for hostnode {hostnodes.replace(';', ',')}"
        for part in hostnodes.split(";"):
            low, _, high = part.partition("-")
            for n in range(int(low), int(high or low) + 1):
                if n >= host_nodes:
                    return f"host NUMA node{n} doesn't exist"
        size = cfg.get("hugepages")
        if size in ("2", "1024") and int(float(numa["memory"])) % int(size):
            return (
                f"Memory size {numa['memory']} is not a multiple of the requested hugepages "
                f"size {size}"
            )
    if total and total != int(cfg.get("memory", 512)):
        return "total memory for NUMA nodes must be equal to vm static memory"
    return None


def _affinity_refusal(cfg, node):
    """taskset (util-linux) sets the mask of QEMU before it runs; sched_setaffinity(2) fails
    with EINVAL when the mask holds no CPU of the node, and the start task fails."""
    if not cfg.get("affinity"):
        return None
    cpus = set()
    for part in cfg["affinity"].split(","):
        low, _, high = part.strip().partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    if all(c >= int(node["maxcpu"]) for c in cpus):
        return f"taskset: failed to set pid's affinity: Invalid argument ({cfg['affinity']})"
    return None


class PveStandin:
    """The state and the request handling, without HTTP (tests can call handle())."""

    def __init__(self, state=None, facts=None, on_start=None, on_stop=None, on_destroy=None):
        self.state = state or default_state()
        self.facts = facts or schema.load_facts()
        self.tickets = {}
        self.tasks = {}
        self.log = []
        self.lock = threading.RLock()
        # hooks (tests/proxmox_standin/vm_containers.py): on_start(vmid, vm, {volid: docker
        # name}), on_stop(vmid, vm), on_destroy(docker name) when a volume is destroyed
        self.on_start, self.on_stop, self.on_destroy = on_start, on_stop, on_destroy

    # --- auth -------------------------------------------------------------------------
    def add_token(self, user, name, privileges, secret=None):
        secret = secret or str(uuid.uuid4())
        self.state["tokens"][f"{user}!{name}"] = {"secret": secret, "privs": sorted(privileges)}
        return secret

    def _auth(self, headers, cookies):
        value = headers.get("Authorization", "")
        match = re.fullmatch(r"PVEAPIToken=([^!]+![^=]+)=(.+)", value)
        if match:
            token = self.state["tokens"].get(match.group(1))
            if token and token["secret"] == match.group(2):
                return {"user": match.group(1), "token": True, "privs": set(token["privs"])}
            raise ApiError(401, "authentication failure")
        ticket = cookies.get("PVEAuthCookie")
        if ticket and ticket in self.tickets:
            return {"user": self.tickets[ticket], "token": False, "privs": None}
        raise ApiError(401, "authentication failure")

    def _has(self, auth, privs, any_of=False):
        if auth["user"] == ROOT_USER:
            return True
        held = auth["privs"] or set()
        return any(p in held for p in privs) if any_of else all(p in held for p in privs)

    def _check_expr(self, auth, expr, values):
        if not expr:
            return True
        kind = expr[0]
        if kind == "perm":
            privs = expr[2]
            any_of = len(expr) > 3 and expr[3] == "any"
            if "require_param" in expr and expr[expr.index("require_param") + 1] not in values:
                return False
            return self._has(auth, privs, any_of)
        if kind == "and":
            return all(self._check_expr(auth, e, values) for e in expr[1:])
        if kind == "or":
            return any(self._check_expr(auth, e, values) for e in expr[1:])
        return kind in ("userid-group", "userid-param", "user")

    def _perm_denied(self, path, privs):
        return ApiError(403, f"Permission check failed ({path}, {', '.join(privs)})")

    def _check_config_perms(self, auth, vmid, params):
        """qemu-server's per-option checks for create/config (see the module docstring)."""
        if auth["user"] == ROOT_USER:
            return
        for key, value in params.items():
            if key in ("node", "vmid", "digest", "delete", "skiplock", "background_delay"):
                continue
            if key.startswith("hostpci"):
                dev = schema.parse_property_string(value, "host")
                if dev.get("host"):
                    raise ApiError(500, f"only root can set '{key}' config for non-mapped devices")
                mapping = dev.get("mapping")
                if not self._has(auth, ["Mapping.Use"]):
                    raise self._perm_denied(f"/mapping/pci/{mapping}", ["Mapping.Use"])
                if not self._has(auth, ["VM.Config.HWType"]):
                    raise self._perm_denied(f"/vms/{vmid}", ["VM.Config.HWType"])
                continue
            if _DISK.fullmatch(key):
                if not self._has(auth, ["VM.Config.Disk"]):
                    raise self._perm_denied(f"/vms/{vmid}", ["VM.Config.Disk"])
                continue
            if re.fullmatch(r"net\d+", key):
                priv = ["VM.Config.Network"]
            elif re.fullmatch(r"ipconfig\d+", key):
                priv = ["VM.Config.Cloudinit"]
            elif re.fullmatch(r"numa\d+|numa", key):
                priv = ["VM.Config.CPU"]
            elif re.fullmatch(r"serial\d+", key):
                continue
            else:
                priv = next((p for p, keys in _PRIV_OF.items() if key in keys), None)
                if priv is None:
                    raise ApiError(500, f"only root can set '{key}' config")
                priv = [priv]
            if not self._has(auth, priv):
                raise self._perm_denied(f"/vms/{vmid}", priv)

    # --- dispatch -----------------------------------------------------------------------
    def handle(self, method, url, body, headers, cookies):
        """-> (status, reason, payload dict). Logs every request."""
        parts = urlsplit(url)
        path = unquote(parts.path)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        params.update(body)
        entry = {"method": method, "path": path, "params": sorted(params)}
        try:
            with self.lock:
                data = self._dispatch(method, path, params, headers, cookies, entry)
            status, reason, payload = 200, "OK", {"data": data}
        except ApiError as exc:
            status, reason = exc.status, exc.reason
            payload = {"data": None}
            if exc.errors:
                payload["errors"] = exc.errors
            payload["message"] = reason + "\n"
        entry["status"] = status
        entry["reason"] = reason
        self.log.append(entry)
        return status, reason, payload

    def _dispatch(self, method, path, params, headers, cookies, entry):
        if not path.startswith("/api2/json/"):
            raise ApiError(501, "Not Implemented")
        api_path = path[len("/api2/json") :]
        template, values = schema.match_path(self.facts, api_path)
        spec = schema.call_spec(self.facts, template, method) if template else None
        if spec is None:
            raise ApiError(501, f"Method '{method} {api_path}' not implemented")
        entry["template"] = template
        errors = schema.check_params(self.facts, template, method, dict(params, **values))
        errors.update(_index_errors(params) if template.startswith("/nodes/{node}/qemu") else {})
        if errors:
            raise ApiError(400, "Parameter verification failed.", errors)
        if template == "/access/ticket":
            return self._ticket(params)
        auth = self._auth(headers, cookies)
        entry["user"] = auth["user"]
        if auth["token"] and not spec.get("allowtoken", 1):
            raise ApiError(403, "Permission check failed (API token not allowed)")
        expr = spec.get("permissions", {}).get("check")
        allowed = self._check_expr(auth, expr, dict(params, **values))
        if not allowed:
            filled = expr[1] if expr and expr[0] == "perm" else "/"
            for key, val in values.items():
                filled = filled.replace("{" + key + "}", val)
            privs = expr[2] if expr and expr[0] == "perm" else ["(see schema)"]
            raise self._perm_denied(filled, privs)
        handler = ROUTES.get((method, template))
        if handler is None:
            raise ApiError(501, f"stand-in does not implement {spec['name']}")
        return getattr(self, handler)(auth, values, params)

    # --- handlers (named after the schema's method names) -------------------------------
    def _ticket(self, params):
        user = params["username"]
        if "@" not in user and params.get("realm"):
            user = f"{user}@{params['realm']}"
        if self.state["passwords"].get(user) != params["password"]:
            raise ApiError(401, "authentication failure")
        ticket = f"PVE:{user}:{uuid.uuid4().hex}"
        self.tickets[ticket] = user
        return {"ticket": ticket, "CSRFPreventionToken": uuid.uuid4().hex, "username": user}

    def _version(self, auth, values, params):
        return {"version": self.facts["pve_version"], "release": "9.1", "repoid": "standin"}

    def _nodes(self, auth, values, params):
        return [
            {"node": n, "status": "online", "maxmem": v["maxmem"], "maxcpu": v["maxcpu"]}
            for n, v in self.state["nodes"].items()
        ]

    def _get_next_vmid(self, auth, values, params):
        used = {int(v) for v in self.state["vms"]}
        if "vmid" in params:
            if int(params["vmid"]) in used:
                raise ApiError(400, f"VM {params['vmid']} already exists")
            return params["vmid"]
        vmid = 100
        while vmid in used:
            vmid += 1
        return str(vmid)

    def _resources(self, auth, values, params):
        out = []
        for vmid, vm in self.state["vms"].items():
            cfg = vm["config"]
            out.append(
                {
                    "id": f"qemu/{vmid}",
                    "type": "qemu",
                    "vmid": int(vmid),
                    "name": cfg.get("name", ""),
                    "node": vm["node"],
                    "status": vm["status"],
                    "template": int(vm.get("template", 0)),
                    "tags": cfg.get("tags", ""),
                    "maxmem": int(cfg.get("memory", 512)) * 1024 * 1024,
                }
            )
        if params.get("type") in (None, "vm"):
            return out
        if params.get("type") == "storage":
            return [
                {
                    "id": f"storage/{node}/{sid}",
                    "type": "storage",
                    "storage": sid,
                    "node": node,
                    "content": ",".join(cfg["content"]),
                    "status": "available" if not cfg.get("disable") else "unknown",
                    "plugintype": "lvmthin",
                    "shared": 0,
                }
                for sid, cfg in self.state["storages"].items()
                for node in cfg["nodes"]
            ]
        return [] if params.get("type") != "node" else self._nodes(auth, values, params)

    def _mappings_visible(self, auth):
        if self._has(auth, ["Mapping.Use"]) or self._has(auth, ["Mapping.Audit"]):
            return self.state["mappings"]
        return []

    def _mapping_index(self, auth, values, params):
        return copy.deepcopy(self._mappings_visible(auth))

    def _mapping_get(self, auth, values, params):
        for mapping in self._mappings_visible(auth):
            if mapping["id"] == values["id"]:
                return copy.deepcopy(mapping)
        raise ApiError(500, f"PCI mapping '{values['id']}' not found")

    def _vm(self, values):
        vm = self.state["vms"].get(str(int(values["vmid"])))
        if vm is None or vm["node"] != values["node"]:
            raise ApiError(
                500,
                f"Configuration file 'nodes/{values['node']}/qemu-server/"
                f"{values['vmid']}.conf' does not exist",
            )
        return vm

    def _vmlist(self, auth, values, params):
        return [
            {
                "vmid": int(vmid),
                "name": vm["config"].get("name", ""),
                "status": vm["status"],
                "template": int(vm.get("template", 0)),
                "maxmem": int(vm["config"].get("memory", 512)) * 1024 * 1024,
                "tags": vm["config"].get("tags", ""),
            }
            for vmid, vm in self.state["vms"].items()
            if vm["node"] == values["node"]
        ]

    def _task(self, node, kind, vmid, auth, status="OK"):
        upid = (
            f"UPID:{node}:{os.getpid():08X}:{len(self.tasks):08X}:{int(time.time()):08X}:"
            f"{kind}:{vmid}:{auth['user']}:"
        )
        self.tasks[upid] = {"node": node, "exitstatus": status, "type": kind, "id": str(vmid)}
        return upid

    def _read_task_status(self, auth, values, params):
        task = self.tasks.get(values["upid"])
        if task is None:
            raise ApiError(500, "no such task")
        if task["exitstatus"] is None:
            return {"upid": values["upid"], "node": task["node"], "status": "running"}
        return {
            "upid": values["upid"],
            "node": task["node"],
            "status": "stopped",
            "exitstatus": task["exitstatus"],
            "type": task["type"],
            "id": task["id"],
        }

    def _read_task_log(self, auth, values, params):
        task = self.tasks.get(values["upid"])
        return [{"n": 1, "t": task["exitstatus"] if task else "no such task"}]

    def _alloc(self, vmid, key, value):
        """STORAGE:SIZE_GiB allocates a volume the way Proxmox names them."""
        parts = value.split(",")
        match = re.fullmatch(r"([A-Za-z][\w.-]*):(\d+(?:\.\d+)?)", parts[0])
        if not match:
            return value
        storage, size = match.group(1), match.group(2)
        vols = self.state["volumes"].setdefault(storage, {})
        n = 0
        while f"vm-{vmid}-disk-{n}" in vols:
            n += 1
        name = f"vm-{vmid}-disk-{n}"
        size_text = "4M" if key.startswith("efidisk") else f"{size}G"
        self.state["volume_serial"] = self.state.get("volume_serial", 0) + 1
        docker = f"vol{self.state['volume_serial']}"
        vols[name] = {"size": size_text, "vmid": str(vmid), "docker": docker}
        rest = [p for p in parts[1:] if not p.startswith("size=")]
        return ",".join([f"{storage}:{name}", *rest, f"size={size_text}"])

    def _check_storage(self, storeid, node, images=True):
        """pve-storage PVE/Storage.pm storage_config ('storage '%s' does not exist') and
        storage_check_enabled ('storage '%s' is not available on node '%s''), then qemu-server
        PVE/API2/Qemu.pm check_storage_access: a disk needs content type images."""
        store = self.state["storages"].get(storeid)
        if store is None:
            raise ApiError(500, f"storage '{storeid}' does not exist")
        if store.get("disable") or node not in store["nodes"]:
            raise ApiError(500, f"storage '{storeid}' is not available on node '{node}'")
        if images and "images" not in store["content"]:
            raise ApiError(
                400,
                "Parameter verification failed.",
                {"storage": f"storage '{storeid}' does not support vm images"},
            )

    def _apply(self, vmid, vm, params):
        for key, value in params.items():
            if _DISK.fullmatch(key) and "import-from" not in str(value):
                match = re.fullmatch(r"([A-Za-z][\w.-]*):(\d+(?:\.\d+)?)", str(value).split(",")[0])
                if match:
                    self._check_storage(match.group(1), vm["node"])
        cfg = vm["config"]
        for key in re.split(r"[,; ]+", params.get("delete", "")):
            if key:
                cfg.pop(key, None)
        for key, value in params.items():
            if key in ("node", "vmid", "delete", "digest", "skiplock", "background_delay"):
                continue
            if key in ("force", "pool", "start", "storage"):
                continue
            if _DISK.fullmatch(key) and "import-from" not in value:
                value = self._alloc(vmid, key, value)
            cfg[key] = str(value)

    def _create_vm(self, auth, values, params):
        vmid = str(int(params["vmid"]))
        if not self._has(auth, ["VM.Allocate"]):
            raise self._perm_denied(f"/vms/{vmid}", ["VM.Allocate"])
        self._check_config_perms(auth, vmid, params)
        if vmid in self.state["vms"]:
            raise ApiError(500, f"unable to create VM {vmid} - VM {vmid} already exists on node")
        vm = {"node": values["node"], "status": "stopped", "config": {}}
        self._apply(vmid, vm, params)
        self.state["vms"][vmid] = vm
        return self._task(values["node"], "qmcreate", vmid, auth)

    def _vm_config(self, auth, values, params):
        cfg = dict(self._vm(values)["config"])
        cfg["digest"] = uuid.uuid5(uuid.NAMESPACE_OID, json.dumps(cfg, sort_keys=True)).hex
        return cfg

    def _update(self, auth, values, params):
        vm = self._vm(values)
        if vm.get("template"):
            raise ApiError(500, "you can't change the configuration of a template")
        self._check_config_perms(auth, values["vmid"], params)
        self._apply(values["vmid"], vm, params)

    def _update_vm_async(self, auth, values, params):
        self._update(auth, values, params)
        return self._task(values["node"], "qmconfig", values["vmid"], auth)

    def _update_vm(self, auth, values, params):
        self._update(auth, values, params)
        return None

    def _vm_status(self, auth, values, params):
        vm = self._vm(values)
        return {
            "vmid": int(values["vmid"]),
            "status": vm["status"],
            "qmpstatus": vm["status"],
            "name": vm["config"].get("name", ""),
            "agent": 1 if vm["config"].get("agent", "0").startswith("1") else 0,
        }

    def _in_background(self, upid, work):
        """Run a hook the way Proxmox runs a task: the call returns the UPID at once and the
        task status says `running` until the work is done (or failed, with its message)."""
        task = self.tasks[upid]
        task["exitstatus"] = None

        def run():
            try:
                work()
                status = "OK"
            except Exception as exc:  # the task fails with the reason, like a qm task
                status = f"{type(exc).__name__}: {exc}"
            with self.lock:
                task["exitstatus"] = status

        threading.Thread(target=run, daemon=True).start()
        return upid

    def _start_refusal(self, vmid, vm):
        """What qemu-server's start task dies with before QEMU runs (or QEMU itself), from
        Proxmox's code, written here independently of the project's checks:
        - PVE/QemuServer.pm config_to_command: sockets x cores above the host's CPUs,
          "MAX %d vcpus allowed per VM on this node";
        - PVE/QemuServer/PCI.pm (hostpci parsing for the command line): pcie=1 on a machine
          that is not q35 (machine_type_is_q35: /q35/), "q35 machine model is not enabled";
          a mapping with no device on this node, "PCI device mapping not found for '%s'";
        - PVE/QemuServer/PCI.pm reserve_pci_usage: a device a running VM holds,
          "PCI device '%s' already in use by VMID '%s'";
        - PVE/QemuServer/Memory.pm (memory part of the command line): hugepages without
          numa, "numa needs to be enabled to use hugepages"; the numaN checks (_numa_refusal);
        - PVE/QemuServer.pm config_to_command: QEMU runs under `taskset --cpu-list --all-tasks
          <affinity>`, which fails when no CPU of the list exists (_affinity_refusal);
        - QEMU: with passed-through devices all guest memory is pinned; more than the node
          has fails the start, "start failed: QEMU exited with code 1"."""
        cfg, node = vm["config"], self.state["nodes"][vm["node"]]
        vcpus = int(cfg.get("sockets", 1)) * int(cfg.get("cores", 1))
        if vcpus > node["maxcpu"]:
            return f"MAX {node['maxcpu']} vcpus allowed per VM on this node"
        if cfg.get("hugepages") and str(cfg.get("numa", "0")).lower() not in ("1", "true", "on"):
            # Proxmox's die has no newline, so Perl adds " at .../Memory.pm line N."
            return "numa needs to be enabled to use hugepages at PVE/QemuServer/Memory.pm"
        refusal = _numa_refusal(cfg, node) or _affinity_refusal(cfg, node)
        if refusal:
            return refusal
        devices = self._pci_paths(vm)
        if isinstance(devices, str):
            return devices
        pcie = [
            key
            for key, value in sorted(cfg.items())
            if re.fullmatch(r"hostpci\d+", key)
            and schema.parse_property_string(value, "host").get("pcie") in ("1", "on", "true")
        ]
        if pcie and "q35" not in cfg.get("machine", ""):
            return (
                "q35 machine model is not enabled at "
                "/usr/share/perl5/PVE/QemuServer/PCI.pm line 514."
            )
        for other_id, other in sorted(self.state["vms"].items()):
            if other_id == str(int(vmid)) or other["status"] != "running":
                continue
            if other["node"] != vm["node"]:
                continue
            held = self._pci_paths(other)
            for path in devices:
                if not isinstance(held, str) and path in held:
                    return f"PCI device '{path}' already in use by VMID '{other_id}'"
        if devices and int(cfg.get("memory", 512)) * 1024 * 1024 > node["maxmem"]:
            return "start failed: QEMU exited with code 1"
        return None

    def _pci_paths(self, vm):
        """The host PCI paths of a VM's hostpciN (mappings resolved on its node), or the
        message a start dies with for a mapping that has no device there."""
        paths = []
        for key, value in sorted(vm["config"].items()):
            if not re.fullmatch(r"hostpci\d+", key):
                continue
            dev = schema.parse_property_string(value, "host")
            if dev.get("mapping"):
                found = [
                    entry.get("path", "")
                    for m in self.state["mappings"]
                    if m["id"] == dev["mapping"]
                    for entry in (schema.parse_property_string(x) for x in m["map"])
                    if entry.get("node") == vm["node"]
                ]
                if not found:
                    return f"PCI device mapping not found for '{dev['mapping']}'"
                paths += found
            elif dev.get("host"):
                host = dev["host"]
                paths += [host if host.count(":") >= 2 else "0000:" + host]
        return paths

    def _vm_start(self, auth, values, params):
        vm = self._vm(values)
        if vm.get("template"):
            raise ApiError(500, "you can't start a vm if it's a template")
        if vm["status"] != "running":
            refusal = self._start_refusal(values["vmid"], vm)
            if refusal:
                # the API answers with the task; the task fails and the VM stays stopped
                return self._task(values["node"], "qmstart", values["vmid"], auth, refusal)
        upid = self._task(values["node"], "qmstart", values["vmid"], auth)
        if vm["status"] == "running":
            return upid
        vm["status"] = "running"
        if not self.on_start:
            return upid
        vmid, volumes = values["vmid"], self.volume_names()
        return self._in_background(upid, lambda: self.on_start(vmid, vm, volumes))

    def _stop(self, auth, values, kind):
        vm = self._vm(values)
        upid = self._task(values["node"], kind, values["vmid"], auth)
        was = vm["status"]
        vm["status"] = "stopped"
        if was == "running" and self.on_stop:
            vmid = values["vmid"]
            return self._in_background(upid, lambda: self.on_stop(vmid, vm))
        return upid

    def _vm_stop(self, auth, values, params):
        return self._stop(auth, values, "qmstop")

    def _vm_shutdown(self, auth, values, params):
        return self._stop(auth, values, "qmshutdown")

    def _destroy_vm(self, auth, values, params):
        vm = self._vm(values)
        if vm["status"] == "running":
            raise ApiError(500, f"VM {values['vmid']} is running - destroy failed")
        vmid = str(int(values["vmid"]))
        for key, value in vm["config"].items():
            if _DISK.fullmatch(key) and ":" in value:
                storage, _, rest = value.partition(":")
                name = rest.split(",")[0]
                if name.startswith(f"vm-{vmid}-"):
                    self._destroy_volume(storage, name)
        del self.state["vms"][vmid]
        return self._task(values["node"], "qmdestroy", vmid, auth)

    def _clone_vm(self, auth, values, params):
        src = self._vm(values)
        newid = str(int(params["newid"]))
        if newid in self.state["vms"]:
            raise ApiError(500, f"unable to create VM {newid}: config file already exists")
        if params.get("storage"):
            self._check_storage(params["storage"], values["node"])
        cfg = {}
        for key, value in src["config"].items():
            if key == "template":
                continue
            if _DISK.fullmatch(key) and ":" in value and "cloudinit" not in value:
                storage = params.get("storage") or value.split(":")[0]
                size = re.search(r"size=(\d+(?:\.\d+)?)", value)
                rest = ",".join(p for p in value.split(",")[1:] if not p.startswith("size="))
                value = self._alloc(newid, key, f"{storage}:{size.group(1) if size else 1}")
                value = value.replace(",size=", ("," + rest if rest else "") + ",size=")
            elif "cloudinit" in value:
                value = value.replace(f"vm-{values['vmid']}-", f"vm-{newid}-")
            cfg[key] = value
        cfg["name"] = params.get("name", f"Copy-of-VM-{src['config'].get('name', '')}")
        if "net0" in cfg:
            cfg["net0"] = re.sub(
                r"=([0-9A-F:]{17})", f"=BC:24:11:{int(newid) % 256:02X}:00:01", cfg["net0"]
            )
        self.state["vms"][newid] = {"node": values["node"], "status": "stopped", "config": cfg}
        return self._task(values["node"], "qmclone", values["vmid"], auth)

    def volume_names(self):
        """{volume id: docker name} of every volume on every storage."""
        return {
            f"{storage}:{name}": vol.get("docker", "")
            for storage, vols in self.state["volumes"].items()
            for name, vol in vols.items()
        }

    def _destroy_volume(self, storage, name):
        vol = self.state["volumes"].get(storage, {}).pop(name, None)
        if vol and self.on_destroy and vol.get("docker"):
            self.on_destroy(vol["docker"])

    def _move_vm_disk(self, auth, values, params):
        """Reassign a disk to another VM on the same node (target-vmid), as Proxmox 7.2+ does:
        the volume is renamed to the new owner and keeps its data. Moves between storages are
        not served by this stand-in."""
        src = self._vm(values)
        disk = params["disk"]
        target = params.get("target-vmid")
        if not target:
            raise ApiError(501, "stand-in serves only disk reassignment (target-vmid)")
        dst = self.state["vms"].get(str(int(target)))
        if dst is None:
            raise ApiError(500, f"could not find target VM {target}")
        if dst["node"] != src["node"]:
            raise ApiError(
                500, f"Both VMs need to be on the same node ({src['node']} != {dst['node']})"
            )
        if src.get("template") or dst.get("template"):
            raise ApiError(500, "Can't move disks from or to template VMs")
        if disk not in src["config"]:
            raise ApiError(500, f"Disk '{disk}' for VM '{values['vmid']}' does not exist")
        target_disk = params.get("target-disk", disk)
        if target_disk in dst["config"]:
            raise ApiError(
                500, f"Target disk key '{target_disk}' is already in use for VM '{target}'"
            )
        if src["status"] == "running" and not disk.startswith("unused"):
            raise ApiError(
                500, "Cannot move disk to another VM while the source VM is running - detach first"
            )
        value = src["config"].pop(disk)
        volid, _, rest = value.partition(",")
        storage, _, name = volid.partition(":")
        vols = self.state["volumes"].setdefault(storage, {})
        vol = vols.pop(name, {"size": "", "docker": ""})
        n = 0
        while f"vm-{int(target)}-disk-{n}" in vols:
            n += 1
        new = f"vm-{int(target)}-disk-{n}"
        vol["vmid"] = str(int(target))
        vols[new] = vol
        dst["config"][target_disk] = f"{storage}:{new}" + ("," + rest if rest else "")
        return self._task(values["node"], "qmmove", values["vmid"], auth)

    def _resize_vm(self, auth, values, params):
        vm = self._vm(values)
        disk = params["disk"]
        if disk not in vm["config"]:
            raise ApiError(500, f"disk '{disk}' does not exist")
        size = params["size"].lstrip("+")
        vm["config"][disk] = re.sub(r"size=[^,]+", f"size={size}", vm["config"][disk])
        return self._task(values["node"], "resize", values["vmid"], auth)

    def _unlink(self, auth, values, params):
        vm = self._vm(values)
        for key in re.split(r"[,; ]+", params["idlist"]):
            if key in vm["config"]:
                value = vm["config"].pop(key)
                if str(params.get("force", "0")) in ("1", "true"):
                    storage, _, name = value.split(",")[0].partition(":")
                    self._destroy_volume(storage, name)
                else:
                    n = 0
                    while f"unused{n}" in vm["config"]:
                        n += 1
                    vm["config"][f"unused{n}"] = value.split(",")[0]


# (method, schema path) -> handler: every call in data/proxmox/.
ROUTES = {
    ("GET", "/version"): "_version",
    ("GET", "/nodes"): "_nodes",
    ("GET", "/cluster/nextid"): "_get_next_vmid",
    ("GET", "/cluster/resources"): "_resources",
    ("GET", "/cluster/mapping/pci"): "_mapping_index",
    ("GET", "/cluster/mapping/pci/{id}"): "_mapping_get",
    ("GET", "/nodes/{node}/qemu"): "_vmlist",
    ("POST", "/nodes/{node}/qemu"): "_create_vm",
    ("DELETE", "/nodes/{node}/qemu/{vmid}"): "_destroy_vm",
    ("POST", "/nodes/{node}/qemu/{vmid}/clone"): "_clone_vm",
    ("GET", "/nodes/{node}/qemu/{vmid}/config"): "_vm_config",
    ("POST", "/nodes/{node}/qemu/{vmid}/config"): "_update_vm_async",
    ("PUT", "/nodes/{node}/qemu/{vmid}/config"): "_update_vm",
    ("PUT", "/nodes/{node}/qemu/{vmid}/resize"): "_resize_vm",
    ("POST", "/nodes/{node}/qemu/{vmid}/move_disk"): "_move_vm_disk",
    ("GET", "/nodes/{node}/qemu/{vmid}/status/current"): "_vm_status",
    ("POST", "/nodes/{node}/qemu/{vmid}/status/start"): "_vm_start",
    ("POST", "/nodes/{node}/qemu/{vmid}/status/stop"): "_vm_stop",
    ("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"): "_vm_shutdown",
    ("PUT", "/nodes/{node}/qemu/{vmid}/unlink"): "_unlink",
    ("GET", "/nodes/{node}/tasks/{upid}/status"): "_read_task_status",
    ("GET", "/nodes/{node}/tasks/{upid}/log"): "_read_task_log",
}


class _Handler(BaseHTTPRequestHandler):
    api: PveStandin  # set on the subclass

    def log_message(self, *args):  # quiet
        return

    def _serve(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode() if length else ""
        ctype = self.headers.get("Content-Type", "")
        if raw and "json" in ctype:
            body = {k: str(v) for k, v in json.loads(raw).items()}
        else:
            body = dict(parse_qsl(raw, keep_blank_values=True))
        cookies = {}
        for part in (self.headers.get("Cookie") or "").split(";"):
            if "=" in part:
                k, _, v = part.strip().partition("=")
                cookies[k] = unquote(v)
        status, reason, payload = self.api.handle(method, self.path, body, self.headers, cookies)
        data = json.dumps(payload).encode()
        self.send_response(status, reason.splitlines()[0] if reason else None)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")


class StandinServer:
    """HTTPS on 127.0.0.1:port in a background thread. `with StandinServer(api, port):`"""

    def __init__(self, api, port=0):
        self.api = api
        self._dir = tempfile.mkdtemp(prefix="pve-standin-")
        cert, key = make_cert(self._dir)
        handler = type("Handler", (_Handler,), {"api": api})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.cert = cert
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--privs", default="all", help="token privileges, comma separated")
    args = parser.parse_args(argv)
    api = PveStandin()
    privs = ALL_PRIVS if args.privs == "all" else args.privs.split(",")
    secret = api.add_token("gpuhost@pve", "gpuhost", privs)
    with StandinServer(api, args.port) as server:
        print(f"pve stand-in on https://127.0.0.1:{server.port} token gpuhost@pve!gpuhost={secret}")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


# The least-privilege token of docs/rebuild.md: what the proxmox_vm role needs, nothing more
# (Datastore.AllocateSpace is checked by Proxmox on disk allocation, not by this stand-in).
ALL_PRIVS = [
    "VM.Allocate",
    "VM.Audit",
    "VM.Clone",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.PowerMgmt",
    "Datastore.AllocateSpace",
    "Mapping.Use",
]

if __name__ == "__main__":
    sys.exit(main())
