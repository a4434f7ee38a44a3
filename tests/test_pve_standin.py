"""The Proxmox API stand-in (a test double, tests/proxmox_standin) refuses what Proxmox
refuses: checked here with the real client (proxmoxer) over HTTPS on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from proxmox_standin.pve_standin import ALL_PRIVS, ROUTES, PveStandin, StandinServer

proxmoxer = pytest.importorskip("proxmoxer")
from proxmoxer.core import ResourceException  # noqa: E402


@pytest.fixture(scope="module")
def standin():
    api = PveStandin()
    api.state["passwords"]["root@pam"] = "rootpw"
    full = api.add_token("gpuhost@pve", "full", ALL_PRIVS)
    no_map = api.add_token("gpuhost@pve", "nomap", set(ALL_PRIVS) - {"Mapping.Use"})
    no_cpu = api.add_token("gpuhost@pve", "nocpu", set(ALL_PRIVS) - {"VM.Config.CPU"})
    with StandinServer(api) as server:

        def client(token=None, secret=None, password=None):
            kw = {"port": server.port, "verify_ssl": False}
            if password:
                return proxmoxer.ProxmoxAPI("127.0.0.1", user="root@pam", password=password, **kw)
            return proxmoxer.ProxmoxAPI(
                "127.0.0.1", user="gpuhost@pve", token_name=token, token_value=secret, **kw
            )

        yield {
            "api": api,
            "full": client("full", full),
            "nomap": client("nomap", no_map),
            "nocpu": client("nocpu", no_cpu),
            "root": client(password="rootpw"),
            "bad": client("full", "not-the-secret"),
        }


def _clone(pve, newid):
    node = pve.nodes("pve1")
    upid = node.qemu(9000).clone.post(newid=newid, name=f"vm{newid}", full=1)
    assert node.tasks(upid).status.get()["exitstatus"] == "OK"
    return node.qemu(newid)


def _refused(call, status):
    with pytest.raises(ResourceException) as info:
        call()
    assert info.value.status_code == status, info.value
    return info.value


def test_clone_configure_start_destroy_with_a_least_privilege_token(standin):
    pve = standin["full"]
    assert pve.version.get()["version"] == "9.1.3"
    vm = _clone(pve, 301)
    cfg = vm.config.get()
    assert cfg["scsi0"].startswith("local-lvm:vm-301-disk-0") and "template" not in cfg
    assert (
        vm.config.put(memory=8192, cpu="host,phys-bits=host", hostpci0="mapping=gpu0,pcie=1")
        is None
    )
    assert vm.config.get()["hostpci0"] == "mapping=gpu0,pcie=1"
    vm.status.start.post()
    assert vm.status.current.get()["status"] == "running"
    _refused(lambda: pve.nodes("pve1").qemu(301).delete(), 500)  # running
    vm.status.stop.post()
    pve.nodes("pve1").qemu(301).delete(purge=1)
    assert 301 not in [v["vmid"] for v in pve.cluster.resources.get(type="vm")]
    assert not [v for v in standin["api"].state["volumes"]["local-lvm"] if "301" in v]


def test_unknown_parameter_is_the_400_proxmox_sends(standin):
    vm = _clone(standin["full"], 302)
    exc = _refused(lambda: vm.config.put(memroy=8192), 400)
    assert "Parameter verification failed" in str(exc)
    assert "memroy" in exc.errors and "not defined in schema" in exc.errors["memroy"]


@pytest.mark.parametrize(
    ("param", "value", "word"),
    [
        ("hostpci0", "mapping=gpu0,pcie=1,hidden=1", "hostpci0.hidden"),
        ("hostpci0", "host=01:00.0.0", "pci id"),
        ("cpu", "host,phys-bits=65", "phys-bits"),
        ("hugepages", "4", "enumeration"),
        ("memory", "lots", "integer"),
        ("sockets", "0", "minimum"),
    ],
)
def test_malformed_parameter_is_refused_with_its_reason(standin, param, value, word):
    vm = standin["full"].nodes("pve1").qemu(9000)
    exc = _refused(lambda: vm.config.put(**{param: value}), 400)
    assert word in exc.errors[param]


def test_a_vmid_below_100_is_refused_by_the_schema(standin):
    exc = _refused(lambda: standin["full"].nodes("pve1").qemu(42).config.get(), 400)
    assert "minimum" in exc.errors["vmid"]


def test_token_cannot_set_args_root_can(standin):
    vm = _clone(standin["full"], 303)
    exc = _refused(lambda: vm.config.put(args="-no-reboot"), 500)
    assert "only root can set 'args' config" in str(exc)
    root_vm = standin["root"].nodes("pve1").qemu(303)
    assert root_vm.config.put(args="-no-reboot") is None
    assert root_vm.config.get()["args"] == "-no-reboot"


def test_token_cannot_pass_a_raw_pci_address(standin):
    vm = _clone(standin["full"], 304)
    exc = _refused(lambda: vm.config.put(hostpci0="0000:01:00.0,pcie=1"), 500)
    assert "non-mapped devices" in str(exc)


def test_missing_privileges_are_403(standin):
    _clone(standin["full"], 305)
    exc = _refused(
        lambda: standin["nomap"].nodes("pve1").qemu(305).config.put(hostpci0="mapping=gpu0"), 403
    )
    assert "Mapping.Use" in str(exc)
    exc = _refused(lambda: standin["nocpu"].nodes("pve1").qemu(305).config.put(cores=4), 403)
    assert "VM.Config.CPU" in str(exc)
    # without Mapping.Use/Audit the mapping list is empty, as on Proxmox
    assert standin["nomap"].cluster.mapping.pci.get() == []
    assert [m["id"] for m in standin["full"].cluster.mapping.pci.get()] == ["gpu0", "gpu1"]


def test_wrong_token_secret_is_401(standin):
    _refused(lambda: standin["bad"].nodes.get(), 401)


def test_every_logged_status_matches_its_refusal(standin):
    log = standin["api"].log
    assert all(e["status"] in (200, 400, 401, 403, 500) for e in log)
    assert any(e["status"] == 400 for e in log)


def test_routes_cover_the_schema_facts():
    import json

    facts = json.loads(
        (Path(__file__).resolve().parents[1] / "data/proxmox/pve-api-9.1.3.json").read_text()
    )
    calls = {(m, p) for p, ms in facts["paths"].items() for m in ms}
    served = set(ROUTES) | {("POST", "/access/ticket")}
    assert served <= calls
    assert calls - served == set()


def test_a_disk_is_reassigned_with_its_data_and_never_off_a_running_vm(standin):
    pve = standin["full"]
    vm = _clone(pve, 306)
    keeper = _clone(pve, 307)
    vm.config.put(scsi1="local-lvm:10")
    docker = standin["api"].volume_names()[vm.config.get()["scsi1"].split(",")[0]]
    vm.status.start.post()
    exc = _refused(lambda: vm.move_disk.post(disk="scsi1", **{"target-vmid": 307}), 500)
    assert "while the source VM is running" in str(exc)
    vm.status.stop.post()
    vm.move_disk.post(disk="scsi1", **{"target-vmid": 307, "target-disk": "scsi1"})
    moved = keeper.config.get()["scsi1"].split(",")[0]
    assert moved.startswith("local-lvm:vm-307-disk-") and "scsi1" not in vm.config.get()
    assert standin["api"].volume_names()[moved] == docker
    pve.nodes("pve1").qemu(306).delete(purge=1)
    assert standin["api"].volume_names()[moved] == docker
