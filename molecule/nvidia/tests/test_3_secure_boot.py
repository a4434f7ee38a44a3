"""Secure Boot on and no MOK configured: a clear failure before any change.

The Secure Boot state comes from a fake efivar file (a TEST DOUBLE of
/sys/firmware/efi/efivars/SecureBoot-*, which containers cannot fake) that the role reads
through nvidia_driver_secure_boot_efivar."""

import subprocess

import pytest
from conftest import FAMILY, inventory_hosts, run_playbook, snapshot, task_results

FAKE_EFIVAR = "/etc/gpuhost-test/SecureBoot-test-double"


@pytest.fixture(scope="module")
def secure_boot_run():
    names = inventory_hosts()
    for name in names:
        # efivarfs layout: 4 bytes of attributes, then the value (1 = Secure Boot enabled).
        subprocess.run(
            ["docker", "exec", name, "sh", "-c",
             f"mkdir -p /etc/gpuhost-test && printf '\\007\\000\\000\\000\\001' > {FAKE_EFIVAR}"],
            check=True,
        )  # fmt: skip
    before = snapshot(names)
    # A release change, so the role has modules to build: exactly when Secure Boot matters.
    out = run_playbook(
        {
            "nvidia_driver_branch": 580,
            "nvidia_driver_version": "580.95.05",
            "nvidia_driver_secure_boot_efivar": FAKE_EFIVAR,
        }
    )
    return out, before, snapshot(names)


def test_fails_with_guidance_and_changes_nothing(host, secure_boot_run):
    out, before, after = secure_boot_run
    name = host.backend.get_hostname()
    assert out["rc"] != 0
    msg = task_results(out, "unless a module signing key is configured")[name]["msg"]
    assert "Secure Boot is enabled" in msg
    assert FAKE_EFIVAR in msg
    assert "mokutil --import" in msg
    assert "nvidia_driver_mok_key" in msg
    assert out["stats"][name]["changed"] == 0
    assert after[name] == before[name]
    assert set(after[name]["versions"]) == set(FAMILY)
