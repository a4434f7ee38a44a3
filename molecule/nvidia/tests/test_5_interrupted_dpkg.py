"""An interrupted install (dpkg killed mid-configure) is found, reported and finished.

The interruption is a stand-in package (gpuhost-standin-interrupted, a TEST DOUBLE built by
../standin_repo.py) whose postinst SIGKILLs the dpkg running it while a marker file exists:
dpkg dies with its journal unmerged and the package half-configured, and from then on apt
refuses to run ("dpkg was interrupted"), which made every re-run of the driver role fail.
Check mode reports and changes nothing; the real run finishes it with `dpkg --configure -a`
(role base, tasks_from dpkg, which cuda_repo runs before the driver packages)."""

import subprocess

import pytest
from conftest import inventory_hosts, run_playbook

PACKAGE = "gpuhost-standin-interrupted"
MARKER = "/etc/gpuhost-test/interrupt-dpkg"


def ran(out: dict, task: str, name: str) -> dict:
    """The host's result of the first run of `task` that was not skipped (cuda_repo, and so
    this check, may be included by both the driver and the toolkit role)."""
    for play in out.get("plays", []):
        for item in play.get("tasks", []):
            result = item["hosts"].get(name)
            if item["task"]["name"].endswith(task) and result and not result.get("skipped"):
                return result
    raise AssertionError(f"{task!r} did not run on {name}")


def sh(name: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", name, "sh", "-c", command],
        capture_output=True,
        text=True,
        check=check,
    )


def dpkg_state(name: str) -> dict:
    status = sh(name, f"dpkg-query -W -f='${{Status}}' {PACKAGE}", check=False).stdout
    journal = sh(name, "ls /var/lib/dpkg/updates | grep -E '^[0-9]+$' || true").stdout.split()
    apt = sh(name, "apt-get install -y --no-download --no-upgrade apt", check=False)
    return {"status": status, "journal": journal, "apt_rc": apt.returncode, "apt": apt.stderr}


@pytest.fixture(scope="module")
def interrupted():
    names = inventory_hosts()
    broken = {}
    for name in names:
        distro = "debian" + sh(name, "cut -d. -f1 /etc/debian_version").stdout.strip()
        deb = f"/srv/nvidia-standin/{distro}/x86_64/{PACKAGE}_1.0-1_all.deb"
        sh(name, f"mkdir -p /etc/gpuhost-test && touch {MARKER}")
        killed = sh(name, f"dpkg -i {deb}", check=False)
        assert killed.returncode != 0, killed.stdout + killed.stderr  # dpkg was killed
        broken[name] = dpkg_state(name)
    # A re-run that has packages to install (another release of branch 580): apt-get runs,
    # and without the recovery it stops at "dpkg was interrupted".
    wanted = {"nvidia_driver_branch": 580, "nvidia_driver_version": "580.95.05"}
    # Check mode asks for what is installed: apt's check-mode candidate for a release inside
    # the branch the host's pin already covers is not the one asked for (a limit of the apt
    # module's simulation, not of this recovery), and this test is about the report.
    checked = run_playbook({"nvidia_driver_branch": 580, "nvidia_driver_version": ""}, check=True)
    after_check = {name: dpkg_state(name) for name in names}
    out = run_playbook(wanted)
    return broken, checked, after_check, out, {name: dpkg_state(name) for name in names}


def test_the_interruption_breaks_apt(host, interrupted):
    state = interrupted[0][host.backend.get_hostname()]
    assert state["status"] == "install ok half-configured"
    assert state["journal"]
    assert state["apt_rc"] != 0
    assert "dpkg was interrupted" in state["apt"]


def test_check_mode_reports_and_changes_nothing(host, interrupted):
    broken, checked, after_check = interrupted[0], interrupted[1], interrupted[2]
    name = host.backend.get_hostname()
    assert checked["rc"] == 0, checked["stats"]
    report = ran(checked, "Report the interrupted dpkg and the recovery", name)["msg"]
    assert f"{PACKAGE} (half-configured)" in report
    assert "a real run would run `dpkg --configure -a`" in report
    assert after_check[name]["status"] == broken[name]["status"]
    assert after_check[name]["apt_rc"] != 0


def test_real_run_recovers_and_says_so(host, interrupted):
    out, after = interrupted[3], interrupted[4][host.backend.get_hostname()]
    name = host.backend.get_hostname()
    assert out["rc"] == 0, out["stats"]
    report = ran(out, "Report the interrupted dpkg and the recovery", name)["msg"]
    assert "dpkg was interrupted" in report
    assert f"{PACKAGE} (half-configured)" in report
    assert "Running `dpkg --configure -a`" in report
    configure = ran(out, "Finish the interrupted install (dpkg --configure -a)", name)
    assert configure["changed"] is True
    assert f"Setting up {PACKAGE}" in configure["stdout"]
    facts = ran(out, "Record what was recovered", name)["ansible_facts"]
    assert facts["gpuhost_dpkg_recovery"]["ran"] == "dpkg --configure -a"
    assert after == {
        "status": "install ok installed",
        "journal": [],
        "apt_rc": 0,
        "apt": after["apt"],
    }
