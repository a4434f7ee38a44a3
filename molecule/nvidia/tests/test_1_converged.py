"""State converge.yml leaves (driver 570.172.08 exactly, CUDA 12.8 beside 13.0), checked in
the containers. The packages come from the STAND-IN repository (a test double of NVIDIA's,
../README.md)."""

import pytest
from conftest import FAMILY, versions


def distro(host) -> str:
    return "debian" + host.file("/etc/debian_version").content_string.split(".")[0].strip()


def test_repository_is_ours_and_signed(host):
    assert host.package("cuda-keyring").is_installed
    source = host.file("/etc/apt/sources.list.d/gpuhost-cuda.sources")
    assert source.contains(f"URIs: file:///srv/nvidia-standin/{distro(host)}/x86_64/")
    assert source.contains("Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg")
    # The keyring's own source points at NVIDIA's (unreachable) URL; the role replaced it.
    assert not host.file(f"/etc/apt/sources.list.d/cuda-{distro(host)}-x86_64.list").exists


def test_exact_release_installed_although_newer_ones_exist(host):
    assert versions(host) == dict.fromkeys(FAMILY, "570.172.08-1")
    table = host.check_output("apt-cache policy nvidia-open")
    for newer in ("570.195.03-1", "580.105.08-1", "590.48.01-1"):
        assert newer in table


def test_driver_packages_held(host):
    held = set(host.check_output("apt-mark showhold").split())
    assert set(FAMILY) <= held


def test_pin_makes_the_wanted_release_the_candidate(host):
    pref = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref")
    assert pref.contains("Pin: version 570.172.08-\\*")
    assert pref.contains("Pin-Priority: 1000")
    for name in FAMILY:
        assert "Candidate: 570.172.08-1" in host.check_output(f"apt-cache policy {name}")
    # What unattended-upgrades would do: nothing to the driver.
    simulation = host.check_output("apt-get -s dist-upgrade")
    assert not [line for line in simulation.splitlines() if line.startswith("Inst nvidia")]


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/gpuhost-blacklist-nouveau.conf")
    assert conf.contains("^blacklist nouveau$")


def test_persistenced_enabled_but_not_started_before_the_reboot(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert not service.is_running


def test_no_kernel_side_in_a_container(host):
    # The container's kernel is the host's: no headers/DKMS build here (README.md).
    assert not host.package("dkms").is_installed


@pytest.mark.parametrize("release", ["12.8", "13.0"])
def test_toolkits_side_by_side(host, release):
    banner = host.check_output(f"/usr/local/cuda-{release}/bin/nvcc --version")
    assert f"release {release}," in banner


def test_cuda_default_and_profile(host):
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.8"
    env = host.check_output("bash -lc 'echo $CUDA_HOME; command -v nvcc; echo $LD_LIBRARY_PATH'")
    home, nvcc, ld_path = env.splitlines()
    assert home == "/usr/local/cuda-12.8"
    assert nvcc == "/usr/local/cuda-12.8/bin/nvcc"
    assert ld_path.split(":")[0] == "/usr/local/cuda-12.8/lib64"
