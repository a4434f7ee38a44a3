"""State the base layer must leave on a fresh Debian host (run by molecule's testinfra)."""

import pytest

SERVICE_USER = "gpuhost"


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_service_account(host):
    user = host.user(SERVICE_USER)
    assert user.exists
    assert user.group == SERVICE_USER
    assert user.shell == "/usr/sbin/nologin"
    assert "video" in user.groups
    # A system account: no login, uid in the system range.
    assert user.uid < 1000


@pytest.mark.parametrize(
    ("path", "owner", "mode"),
    [
        ("/opt/gpuhost", "root", 0o755),
        ("/etc/gpuhost", "root", 0o750),
        # Root's: the service cannot plant or rename what root copies back (issue 15, item 1).
        ("/var/lib/gpuhost", "root", 0o750),
        ("/var/lib/gpuhost/service", SERVICE_USER, 0o750),
        ("/var/cache/gpuhost", SERVICE_USER, 0o750),
    ],
)
def test_directories(host, path, owner, mode):
    f = host.file(path)
    assert f.is_directory
    assert f.user == owner
    assert f.group == SERVICE_USER
    assert f.mode == mode


@pytest.mark.parametrize("package", ["acl", "ca-certificates", "curl", "python3-venv", "pciutils"])
def test_base_packages(host, package):
    assert host.package(package).is_installed
