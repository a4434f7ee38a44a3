"""The GPU VM spec (role proxmox_vm): every refusal issue 13 lists fails before any change,
naming the variable; a good spec passes Proxmox's own API schema (data/proxmox/)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_vm import (
    api_errors,
    args_line,
    config_diff,
    desired_config,
    root_argv,
    spec_errors,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_pve_schema import load_facts
from proxmox_standin import specs

ROOT = Path(__file__).resolve().parents[1]
FACTS = load_facts()
DEFAULTS = specs.DEFAULTS

GOOD = specs.GOOD
MAP = "id=10de:2bb5,iommugroup={g},node=pve1,path=0000:{b:02x}:00.0,subsystem-id=10de:204b"
API = {
    "vms": [
        {"vmid": 9000, "name": "debian-12-cloud", "node": "pve1", "template": 1, "tags": ""},
        {"vmid": 150, "name": "db", "node": "pve1", "tags": ""},
    ],
    "node": {"node": "pve1", "maxmem": 64 * 1024**3, "maxcpu": 32},
    "mappings": [{"id": f"gpu{i}", "map": [MAP.format(g=20 + i, b=1 + i)]} for i in range(2)],
    "storages": [
        {
            "storage": "local-lvm",
            "node": "pve1",
            "content": "images,rootdir",
            "status": "available",
        },
        {"storage": "local", "node": "pve1", "content": "iso,vztmpl,backup", "status": "available"},
    ],
    "configs": {"150": {"name": "db", "memory": "4096"}},
    "template": {
        "scsi0": "local-lvm:base-9000-disk-0,size=3G",
        "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
    },
    "current": None,
    "keeper": None,
    "purpose": "create",
}


def spec(**changes):
    out = copy.deepcopy(GOOD)
    out.update(changes)
    return out


def test_good_spec_passes_schema_and_api_checks():
    assert spec_errors(GOOD, FACTS) == []
    assert api_errors(GOOD, API) == []


def test_config_is_what_the_api_returns():
    cfg = desired_config(GOOD)
    assert cfg["hostpci0"] == "mapping=gpu0,pcie=1"
    assert cfg["hostpci1"] == "mapping=gpu1,pcie=1"
    assert cfg["memory"] == "16384" and cfg["balloon"] == "0"
    assert cfg["sshkeys"].startswith("ssh-ed25519%20AAAA")
    assert args_line(GOOD) == ""


def _one(errors, var):
    assert errors, "expected a refusal"
    assert any(e.startswith(var) for e in errors), errors
    return next(e for e in errors if e.startswith(var))


def test_unknown_pci_mapping_refused():
    msg = _one(api_errors(spec(proxmox_vm_gpus=["gpu0", "gpu7"]), API), "proxmox_vm_gpus[1]")
    assert "no such PCI resource mapping" in msg and "gpu0, gpu1" in msg


def test_raw_pci_address_refused_as_root_only():
    msg = _one(spec_errors(spec(proxmox_vm_gpus=["0000:01:00.0"]), FACTS), "proxmox_vm_gpus[0]")
    assert "root@pam" in msg and "mapping" in msg


def test_hidden_with_clique_refused():
    bad = spec(
        proxmox_vm_cpu="host,hidden=1",
        proxmox_vm_gpu_clique=True,
        proxmox_vm_node_ssh_host="pve1",
    )
    msg = _one(spec_errors(bad, FACTS), "proxmox_vm_cpu")
    assert "hidden=1" in msg
    # without the clique hidden=1 is a valid cpu option
    assert spec_errors(spec(proxmox_vm_cpu="host,hidden=1"), FACTS) == []


def test_memory_larger_than_node_refused():
    msg = _one(api_errors(spec(proxmox_vm_memory_mib=131072), API), "proxmox_vm_memory_mib")
    assert "65536 MiB" in msg


def test_vmid_of_unmanaged_vm_refused():
    msg = _one(api_errors(spec(proxmox_vm_vmid=150), API), "proxmox_vm_vmid")
    assert "'db'" in msg and "does not manage" in msg
    # the same vmid held by the managed VM itself is fine (a second run)
    managed = dict(
        API, vms=[*API["vms"], {"vmid": 201, "name": "gpu-vm1", "node": "pve1", "tags": "gpuhost"}]
    )
    assert api_errors(GOOD, managed) == []


def test_clique_without_function_0_refused():
    api = copy.deepcopy(API)
    api["mappings"][1]["map"] = [MAP.format(g=21, b=2).replace("00.0", "00")]
    clique = spec(proxmox_vm_gpu_clique=True, proxmox_vm_node_ssh_host="pve1")
    msg = _one(api_errors(clique, api), "proxmox_vm_gpus[1]")
    assert ".0" in msg and "0000:02:00" in msg
    assert api_errors(clique, API) == []
    assert args_line(clique) == (
        "-set device.hostpci0.x-nv-gpudirect-clique=0 -set device.hostpci1.x-nv-gpudirect-clique=0"
    )


@pytest.mark.parametrize(
    "change",
    [
        {"proxmox_vm_gpu_clique": True},
        {"proxmox_vm_mmio64_mib": 1048576},
        {"proxmox_vm_extra_args": "-no-reboot"},
    ],
)
def test_token_cannot_set_args_without_the_node_ssh_step(change):
    no_host = spec(proxmox_vm_node_ssh_host="", proxmox_vm_hugepages="", **change)
    msg = _one(spec_errors(no_host, FACTS), "proxmox_vm_node_ssh_host")
    assert "only root can set 'args' config" in msg
    assert spec_errors(spec(proxmox_vm_node_ssh_host="pve1", **change), FACTS) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"proxmox_vm_hugepages": "1024"}, "`hugepages` (proxmox_vm_hugepages)"),
        ({"proxmox_vm_hugepages": "", "proxmox_vm_placement": "auto"}, "`affinity`"),
    ],
)
def test_root_only_hugepages_and_affinity_need_the_node_ssh_step(change, words):
    """qemu-server puts affinity and hugepages in no privilege class: root@pam only."""
    msg = _one(spec_errors(spec(proxmox_vm_node_ssh_host="", **change), FACTS), "proxmox_vm_node")
    assert words in msg and "only root can set" in msg
    assert spec_errors(spec(**change), FACTS) == []


def test_root_options_go_through_qm_set_only_when_they_differ():
    placed = {"mode": "auto", "root": {"affinity": "4-7,68-71", "hugepages": None}}
    current = {"affinity": "0-3", "hugepages": "2"}
    assert root_argv(GOOD, placed, current) == [
        "--affinity",
        "4-7,68-71",
        "--delete",
        "hugepages",
    ]
    assert root_argv(GOOD, placed, {"affinity": "4-7,68-71"}) == []
    # placement off: the spec's hugepages, affinity untouched
    assert root_argv(GOOD, None, current) == ["--hugepages", "1024"]
    assert "hugepages" not in desired_config(GOOD)


@pytest.mark.parametrize(
    ("change", "var", "words"),
    [
        ({"proxmox_vm_cpu": "host,phys-bits=99"}, "proxmox_vm_cpu", "phys-bits"),
        ({"proxmox_vm_cpu": "host,bogus=1"}, "proxmox_vm_cpu", "not defined in schema"),
        ({"proxmox_vm_machine": "q35;rm -rf"}, "proxmox_vm_machine", "regex"),
        ({"proxmox_vm_hugepages": "4"}, "proxmox_vm_hugepages", "enumeration"),
        ({"proxmox_vm_ipconfig0": "ip=dhcp,mtu=9000"}, "proxmox_vm_ipconfig0", "mtu"),
        ({"proxmox_vm_name": "gpu_vm"}, "proxmox_vm_name", "dns-name"),
        ({"proxmox_vm_gpus": ["Bad Name"]}, "proxmox_vm_gpus[0]", "configuration ID"),
        ({"proxmox_vm_sockets": 0}, "proxmox_vm_sockets", "minimum"),
        ({"proxmox_vm_vmid": 42}, "proxmox_vm_vmid", "100 - 999999999"),
        ({"proxmox_vm_node": ""}, "proxmox_vm_node", "must be set"),
        ({"proxmox_vm_numa": False}, "proxmox_vm_hugepages", "NUMA"),
        ({"proxmox_vm_memory_mib": 16000}, "proxmox_vm_memory_mib", "hugepage"),
        ({"proxmox_vm_api_token_id": ""}, "proxmox_vm_api_token_id", "no credentials"),
    ],
)
def test_schema_and_shape_refusals_name_the_variable(change, var, words):
    assert words in _one(spec_errors(spec(**change), FACTS), var)


def test_diff_is_empty_for_the_same_config_in_another_key_order():
    cfg = desired_config(GOOD)
    current = dict(cfg, cpu="phys-bits=host,host", memory=16384, tags="gpuhost")
    current["sshkeys"] = current["sshkeys"].replace("%20", " ")
    assert config_diff(cfg, current) == {}
    diff = config_diff(cfg, dict(current, memory="8192", hostpci5="mapping=gpu5"))
    assert diff == {
        "memory": {"before": "8192", "after": "16384"},
        "hostpci5": {"before": "mapping=gpu5", "after": None},
    }


def test_the_example_inventory_vm_is_in_both_groups_and_valid():
    """inventory/proxmox-example: the VM is in proxmox_vms and gpu_hosts (docs/rebuild.md), and its
    spec passes the offline checks (the secret comes from the environment, here a stand-in)."""
    inv = ROOT / "inventory" / "proxmox-example"
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
    assert "gpu-vm1" in hosts["proxmox_vms"]["hosts"]
    assert "gpu-vm1" in hosts["gpu_hosts"]["hosts"]
    v = dict(DEFAULTS, proxmox_vm_name="gpu-vm1", proxmox_vm_api_token_secret="***")
    v.update(yaml.safe_load((inv / "group_vars" / "proxmox_vms.yml").read_text()))
    v.update(
        {
            k: x
            for k, x in hosts["proxmox_vms"]["hosts"]["gpu-vm1"].items()
            if k.startswith("proxmox_vm_")
        }
    )
    assert spec_errors(v, FACTS) == []


def test_an_http_api_host_is_refused_naming_the_variable():
    msg = _one(
        spec_errors(spec(proxmox_vm_api_host="http://192.0.2.10"), FACTS), "proxmox_vm_api_host"
    )
    assert "'http://192.0.2.10'" in msg and "https" in msg


def test_a_token_without_its_secret_is_refused_before_any_request():
    msg = _one(
        spec_errors(spec(proxmox_vm_api_token_secret=""), FACTS), "proxmox_vm_api_token_secret"
    )
    assert "'gpuhost'" in msg and "GPUHOST_PROXMOX_TOKEN_SECRET" in msg


CURRENT = {
    "name": "gpu-vm1",
    "tags": "gpuhost",
    "scsi0": "local-lvm:vm-201-disk-0,size=3G",
    "ide2": "local-lvm:vm-201-cloudinit,media=cdrom",
    "scsi1": "local-lvm:vm-201-disk-2,size=200G",
}
DISK = {"slot": "scsi1", "storage": "local-lvm", "size_gib": 200}
ON_NODE = dict(
    API, vms=[*API["vms"], {"vmid": 201, "name": "gpu-vm1", "node": "pve1", "tags": "gpuhost"}]
)


@pytest.mark.parametrize(
    ("change", "var"),
    [
        ({"size_gib": 300}, "proxmox_vm_model_disk.size_gib=300"),
        ({"slot": "scsi2"}, "proxmox_vm_model_disk.slot='scsi2'"),
        ({"storage": "tank"}, "proxmox_vm_model_disk.storage='tank'"),
        ({"size_gib": 0}, "proxmox_vm_model_disk.size_gib=0"),
    ],
)
@pytest.mark.parametrize("where", ["current", "keeper"])
def test_a_model_disk_change_is_refused_unless_delete_model_disk(change, var, where):
    api = dict(ON_NODE, **{where: CURRENT})
    assert api_errors(spec(proxmox_vm_model_disk=DISK), api) == []
    bad = spec(proxmox_vm_model_disk=dict(DISK, **change))
    for purpose in ("rebuild", "destroy"):
        msg = _one(api_errors(bad, dict(api, purpose=purpose)), var)
        assert "--delete-model-disk" in msg
    allowed = [
        e
        for e in api_errors(dict(bad, proxmox_vm_destroy_model_disk=True), api)
        if e.startswith("proxmox_vm_model_disk")
    ]
    assert allowed == [] or change == {"storage": "tank"}, allowed  # tank: no such storage


@pytest.mark.parametrize(
    ("vm", "var"),
    [
        ({"vmid": 201, "name": "gpu-vm1", "tags": ""}, "proxmox_vm_vmid=201"),
        ({"vmid": 201, "name": "other", "tags": "gpuhost"}, "proxmox_vm_vmid=201"),
        (
            {"vmid": 100201, "name": "gpu-vm1-model", "tags": ""},
            "proxmox_vm_model_keeper_vmid=100201",
        ),
    ],
)
def test_destroy_identifies_the_vm_by_vmid_name_and_tag(vm, var):
    api = dict(API, vms=[*API["vms"], dict(vm, node="pve1")], purpose="destroy")
    _one(api_errors(GOOD, api), var)
