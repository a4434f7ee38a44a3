"""The product against one recorded real-VM run of `make vm-smoke` (tests/fixtures/vm-smoke,
SOURCE.md there): Debian 12 under QEMU with OVMF and Secure Boot on, a real DKMS build of the
stand-in module (a TEST DOUBLE's package), a real MOK signature the kernel rejects, a real
reboot. Each test feeds what the VM really said to the product's readers and deciders and
checks they give the decision the recorded run took (and the outcome it recorded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.filter import gpuhost_nvidia_driver as filters
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as nd
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_secure_boot as sb

FIXTURE = Path(__file__).parent / "fixtures" / "vm-smoke"
RECORD = json.loads((FIXTURE / "record.json").read_text())
EVENTS = json.loads((FIXTURE / "driver-events.json").read_text())
FIRST, AFTER = RECORD["observations"]["first_boot"], RECORD["observations"]["after_provision"]
WANTED = "580.105.08-1"  # the newest 580 release of the stand-in repository


def event(run: str, prefix: str) -> dict:
    found = [e for e in EVENTS[run] if e["task"].startswith(prefix)]
    assert found, f"{run}: no recorded task starting {prefix!r}"
    return found[-1]


def efivar_bytes(obs: dict) -> bytes:
    return bytes(int(b, 16) for b in obs["secure_boot_efivar_hex"].split())


@pytest.mark.parametrize("obs", [FIRST, AFTER], ids=["first_boot", "after_reboot"])
def test_secure_boot_reader_on_the_recorded_vm(obs):
    # The real efivarfs bytes and `mokutil --sb-state` of the VM, both boots.
    assert sb.parse_efivar(efivar_bytes(obs)) == sb.ENABLED
    assert sb.parse_mokutil(obs["mokutil_sb_state"]) == sb.ENABLED
    got = sb.read_secure_boot(
        lambda path: efivar_bytes(obs) if path == sb.SECURE_BOOT_EFIVAR else None,
        True,
        lambda: pytest.fail("mokutil must not be asked when the variable is readable"),
    )
    assert got == {"state": sb.ENABLED, "source": sb.SECURE_BOOT_EFIVAR}
    assert "[integrity]" in obs["lockdown"]  # the kernel's lockdown that Secure Boot turned on


def test_recorded_probe_agrees_with_the_reader():
    probe = event("provision-no-mok", "Read the driver state of the host")["res"]
    assert probe["secure_boot"] == {"state": sb.ENABLED, "source": sb.SECURE_BOOT_EFIVAR}


def test_no_mok_run_refuses_under_secure_boot_before_any_change():
    probe = event("provision-no-mok", "Read the driver state of the host")["res"]
    plan = nd.plan(probe, {}, 580, "", ["nvidia-open", "nvidia-persistenced"], True)
    assert plan["action"] == "install"  # so the Secure Boot stop applies (preflight.yml)
    refusal = event("provision-no-mok", "Stop under Secure Boot")
    assert refusal["event"] == "runner_on_failed"
    assert "Secure Boot is enabled" in refusal["res"]["msg"]
    assert RECORD["commands"]["provision-no-mok"]["rc"] == 1
    # check mode stops at the same place (recorded): the run exited 1 with that failure.
    assert RECORD["commands"]["check"]["rc"] == 1
    assert (
        "Stop under Secure Boot unless a module signing key"
        in (FIXTURE / "check.stdout").read_text()
    )
    assert not EVENTS["provision-no-mok"][-1]["task"].startswith("Install")


def test_mok_run_builds_and_signs_and_the_kernel_rejects_the_key():
    install = event("provision-mok", "Install the NVIDIA driver packages")
    assert install["res"]["changed"] is True
    assert AFTER["dkms_status"] == "nvidia/580.105.08, 6.1.0-50-amd64, x86_64: installed"
    assert AFTER["modinfo_nvidia_signer"] == "gpuhost vm-smoke MOK"
    assert "Key was rejected by service" in AFTER["modprobe_nvidia"]
    loads = event("provision-mok", "Load the new module")["res"]["results"]
    assert [r["item"] for r in loads] == ["nvidia", "nvidia_uvm"]
    assert all("Key was rejected by service" in r["msg"] for r in loads)


def test_activation_decisions_match_the_recorded_run():
    after_install = event("provision-mok", "Read the driver state after the install")["res"]
    needed = nd.reboot_needed(after_install, WANTED)
    assert needed is True
    first = filters.nvidia_driver_activation(after_install, needed, "if_needed", [], False, False)
    assert first["action"] == "load"  # nothing holds the GPUs: modprobe, no reboot
    after_modprobe = event("provision-mok", "Read the driver state after modprobe")["res"]
    assert nd.reboot_needed(after_modprobe, WANTED) is True
    error = event("provision-mok", "Load the new module")["res"]["results"][0]["msg"]
    second = filters.nvidia_driver_activation(
        after_modprobe, True, "if_needed", [], False, False, error
    )
    assert second["action"] == "reboot"
    assert "Key was rejected by service" in second["reason"]
    reboot = event("provision-mok", "Reboot to load the new NVIDIA driver")["res"]
    assert reboot["rebooted"] is True and reboot["changed"] is True
    assert FIRST["boot_id"] != AFTER["boot_id"]  # the VM really restarted


def test_after_the_reboot_the_role_fails_with_what_the_vm_shows():
    rebooted = event("provision-mok", "Read the driver state after the reboot")["res"]
    assert rebooted["secure_boot"]["state"] == sb.ENABLED  # back through shim and grub
    assert nd.reboot_needed(rebooted, WANTED) is True  # so the assert must fail, and did:
    failed = event("provision-mok", "Check that the new driver loaded after the reboot")
    assert failed["event"] == "runner_on_failed"
    assert "rebooted, but the loaded driver is none" in failed["res"]["msg"]
    assert RECORD["commands"]["provision-mok"]["rc"] == 1
    report = json.loads((FIXTURE / "provision-mok.report.json").read_text())
    assert "Check that the new driver loaded after the reboot" in json.dumps(report)
