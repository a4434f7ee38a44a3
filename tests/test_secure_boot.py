"""Secure Boot has one reader (plugins/module_utils/gpuhost_secure_boot.py) that preflight's
gpu_facts and the nvidia_driver probe both go through, at the SecureBoot variable's real
efivarfs path. Fixtures: tests/fixtures/efivars/ (4 attribute bytes + 1 data byte, SOURCE.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as nd
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_secure_boot as sb
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import (
    Probe,
    collect_host,
)
from gpuhost_fakes import FakeProbe

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests/fixtures/efivars"
# Written out here, not taken from the code under test: the EFI global variable GUID of the
# UEFI specification (the kernel's EFI_GLOBAL_VARIABLE_GUID), under which firmware publishes
# SecureBoot.
REAL_PATH = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _tree(tmp_path: Path, fixture: str | None) -> Path:
    """A root with an EFI firmware directory and, unless None, the fixture as SecureBoot."""
    (tmp_path / "sys/firmware/efi/efivars").mkdir(parents=True)
    if fixture:
        shutil.copyfile(FIXTURES / fixture, tmp_path / REAL_PATH.lstrip("/"))
    return tmp_path


CASES = [("SecureBoot-enabled", "enabled"), ("SecureBoot-disabled", "disabled"), (None, "unknown")]


def test_fixtures_are_efivarfs_shaped():
    for name in ("SecureBoot-enabled", "SecureBoot-disabled"):
        data = (FIXTURES / name).read_bytes()
        assert len(data) == 5 and data[:4] == b"\x06\x00\x00\x00"


def test_the_default_path_is_the_efi_global_variable():
    assert sb.SECURE_BOOT_EFIVAR == REAL_PATH
    # The role's setting (its test seam) and the module's default are that same path.
    defaults = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert defaults["nvidia_driver_secure_boot_efivar"] == REAL_PATH
    spec = yaml.safe_load((ROOT / "roles/nvidia_driver/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert options["nvidia_driver_secure_boot_efivar"]["default"] == REAL_PATH
    module = (ROOT / "plugins/modules/nvidia_driver_probe.py").read_text()
    assert f"default: {REAL_PATH}" in module


@pytest.mark.parametrize(("fixture", "state"), CASES)
def test_nvidia_driver_probe_reads_the_real_path(tmp_path, fixture, state):
    root = _tree(tmp_path, fixture)
    found = nd.secure_boot_state(str(root), sb.SECURE_BOOT_EFIVAR, lambda: None)
    assert found["state"] == state
    if fixture:
        assert found["source"] == REAL_PATH


@pytest.mark.parametrize(("fixture", "state"), CASES)
def test_preflight_host_facts_read_the_real_path(tmp_path, fixture, state):
    # Probe is gpu_facts' real door to the machine, rooted at the fixture tree; mokutil is
    # not consulted when the variable answers (and is absent on this test machine or not).
    root = _tree(tmp_path, fixture)
    probe = Probe(root=str(root))
    probe.run = lambda argv: (None, "", f"{argv[0]} not found")
    host = collect_host(probe)
    assert host["secure_boot"] == state
    if state == "unknown":
        assert REAL_PATH in host["unknown"]["secure_boot"]


@pytest.mark.parametrize(("fixture", "state"), CASES)
def test_both_readers_agree(tmp_path, fixture, state):
    root = _tree(tmp_path, fixture)
    probe = Probe(root=str(root))
    probe.run = lambda argv: (None, "", "not found")
    assert (
        collect_host(probe)["secure_boot"]
        == nd.secure_boot_state(str(root), sb.SECURE_BOOT_EFIVAR, lambda: None)["state"]
        == state
    )


def test_order_efivar_then_bios_then_mokutil(tmp_path):
    calls = []

    def mokutil():
        calls.append(1)
        return "SecureBoot enabled\n"

    # No /sys/firmware/efi at all: BIOS boot, Secure Boot cannot be on; mokutil not asked.
    found = nd.secure_boot_state(str(tmp_path), sb.SECURE_BOOT_EFIVAR, mokutil)
    assert found["state"] == "disabled" and not calls
    # EFI without the variable: mokutil answers.
    _tree(tmp_path, None)
    assert nd.secure_boot_state(str(tmp_path), sb.SECURE_BOOT_EFIVAR, mokutil) == {
        "state": "enabled",
        "source": "mokutil --sb-state",
    }
    # The variable wins over mokutil, which is then not run.
    calls.clear()
    shutil.copyfile(FIXTURES / "SecureBoot-disabled", tmp_path / REAL_PATH.lstrip("/"))
    found = nd.secure_boot_state(str(tmp_path), sb.SECURE_BOOT_EFIVAR, mokutil)
    assert found == {"state": "disabled", "source": REAL_PATH} and not calls


@pytest.mark.parametrize(
    ("data", "state"),
    [
        (b"\x06\x00\x00\x00\x01", "enabled"),
        (b"\x06\x00\x00\x00\x00", "disabled"),
        (b"\x06", None),
        (b"", None),
        (None, None),
    ],
)
def test_parse_efivar(data, state):
    assert sb.parse_efivar(data) == state


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled\n", "disabled"),
        ("EFI variables are not supported on this system\n", "disabled"),
        ("This system doesn't support Secure Boot\n", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_mokutil(text, state):
    assert sb.parse_mokutil(text) == state


def test_fake_probe_path_matches(tmp_path):
    # The recorded-host fake (tests/gpuhost_fakes.py) with the variable at the real path.
    probe = FakeProbe(
        files={
            "/sys/firmware/efi/fw_platform_size": "64",
            REAL_PATH: (FIXTURES / "SecureBoot-enabled").read_bytes(),
        }
    )
    assert collect_host(probe)["secure_boot"] == "enabled"
