"""State the Debian 13 host must be in after side_effect.yml: role python_env stopped twice
(Python 3.13 for a 3.11 lock; uv's managed Python 3.11 not downloadable) before it made a
venv, and the directory for uv-managed interpreters it created is root's alone."""

import pytest

SERVICE_USER = "gpuhost"
INSTALL_DIR = "/opt/gpuhost/python"


@pytest.fixture(scope="module", autouse=True)
def _debian_13_only(host):
    if "managed_python" not in host.ansible.get_variables()["group_names"]:
        pytest.skip("only the Debian 13 host tries python_env_python_source: managed")


def test_the_host_python_is_the_one_that_does_not_fit(host):
    assert host.check_output("/usr/bin/python3 -V").startswith("Python 3.13.")


def test_no_venv_was_made(host):
    assert not host.file("/opt/gpuhost/venv").exists
    # Neither the link nor a venv beside it: the role stopped before building one.
    assert host.run("ls -A /opt/gpuhost/venvs 2>/dev/null").stdout.strip() == ""


def test_managed_python_dir_is_roots_and_holds_no_python(host):
    f = host.file(INSTALL_DIR)
    assert f.is_directory
    assert (f.user, f.group, f.mode) == ("root", "root", 0o755)
    with host.sudo(SERVICE_USER):
        assert host.run(f"test -w {INSTALL_DIR}").rc != 0
    assert host.run(f"ls -d {INSTALL_DIR}/cpython-*").rc != 0


def test_uv_left_nothing_in_roots_bin(host):
    # --no-bin: no python3.11 shim in root's ~/.local/bin.
    assert host.run("ls /root/.local/bin/python3*").rc != 0
