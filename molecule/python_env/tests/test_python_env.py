"""State role python_env must leave: the venv is exactly its lock, owned by root and not
writable by the service account (nor its uv cache, nor hard-linked into a directory the
service can write), checked clean, with compile caches the service account can write (run
by molecule's testinfra after the side effect, so the lock in force is the changed one:
tabulate 0.9.0)."""

import json
import re

import pytest

SERVICE_USER = "gpuhost"
# The link python_env_venv_dir; the venv it leads to is one of python_env_venvs_dir, named by
# the lock's sha256 (the changed lock's, after the side effect).
LINK = "/opt/gpuhost/venv"
VENVS = "/opt/gpuhost/venvs"
UV = "/opt/gpuhost/uv/bin/uv"
UV_CACHE = "/opt/gpuhost/uv-cache"
# What the server can write (its unit's ReadWritePaths: gpuhost_cache_dir, gpuhost_state_dir).
SERVICE_WRITABLE = ["/var/cache/gpuhost", "/var/lib/gpuhost"]
CACHES = [
    "/var/cache/gpuhost/flashinfer",
    "/var/cache/gpuhost/triton",
    "/var/cache/gpuhost/tvm-ffi",
]
# The default lane's promise (docs/reference.md §2); the side effect moves only tabulate.
STACK = {
    "sglang": "0.5.10.post1",
    "sglang-kernel": "0.4.1",
    "flashinfer-python": "0.6.7.post3",
    "flashinfer-cubin": "0.6.7.post3",
    "torch": "2.9.1",
    "transformers": "5.3.0",
    "triton": "3.5.1",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
INSTALLED = (
    "import importlib.metadata as m, json, re; "
    "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version "
    "for d in m.distributions()}))"
)


def _normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module", autouse=True)
def _synced_host_only(host):
    # The Debian 13 host (group managed_python) never gets a venv: test_managed_python.py.
    if "gpu_hosts" not in host.ansible.get_variables()["group_names"]:
        pytest.skip("no venv on this host by design (Debian 13, see side_effect.yml)")


@pytest.fixture(scope="module")
def venv_dir(host):
    """The real venv: find, stat and ownership checks must not stop at the link."""
    target = host.check_output(f"readlink {LINK}")
    assert re.fullmatch(rf"{VENVS}/[0-9a-f]{{16}}", target), target
    return target


@pytest.fixture(scope="module")
def site(venv_dir):
    return f"{venv_dir}/lib/python3.11/site-packages"


def test_link_names_the_venv_of_the_lock_in_force(host, venv_dir):
    link = host.file(LINK)
    assert link.is_symlink and link.user == "root"
    lock_sha = host.file(f"{venv_dir}/gpuhost-lock.txt").sha256sum
    assert venv_dir == f"{VENVS}/{lock_sha[:16]}"
    # The side effect kept one venv (python_env_venvs_keep 1): the first one is gone.
    assert host.check_output(f"ls {VENVS}").split() == [venv_dir.rsplit("/", 1)[1]]
    f = host.file(VENVS)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o755)


@pytest.fixture(scope="module")
def installed(host):
    with host.sudo(SERVICE_USER):
        out = host.check_output(f'{LINK}/bin/python -c "{INSTALLED}"')
    return json.loads(out)


@pytest.fixture(scope="module")
def lock_pins(host, venv_dir):
    text = host.file(f"{venv_dir}/gpuhost-lock.txt").content_string
    return {_normal(m.group(1)): m.group(2) for m in map(PIN.match, text.splitlines()) if m}


def test_stack_versions_from_importlib_metadata(installed):
    assert {name: installed.get(name) for name in STACK} == STACK


def test_venv_is_exactly_the_lock(installed, lock_pins):
    # pip and friends are not in a uv venv, so nothing may be extra or missing.
    assert installed == lock_pins


def test_side_effect_lock_is_in_force(installed):
    assert installed["tabulate"] == "0.9.0"
    assert "six" not in installed


def test_uv_pip_check_is_clean(host):
    with host.sudo(SERVICE_USER):
        result = host.run(f"{UV} pip check --python {LINK}/bin/python")
    assert result.rc == 0, result.stderr
    assert "compatible" in result.stdout + result.stderr


def test_venv_runs_the_distro_python(host):
    assert host.file(f"{LINK}/bin/python").is_symlink
    out = host.check_output(f"{LINK}/bin/python -c 'import sys; print(sys.base_prefix)'")
    assert out == "/usr"
    assert host.check_output(f"{LINK}/bin/python -V").startswith("Python 3.11.")


def test_venv_owned_by_root_and_not_writable_by_others(host, venv_dir, site):
    for path in (venv_dir, f"{venv_dir}/bin", f"{site}/sglang"):
        f = host.file(path)
        assert (f.user, f.group) == ("root", "root"), path
    # Nothing in the venv belongs to another account or is writable by group or others.
    foreign = host.check_output(f"find {venv_dir} ! -user root | head -5")
    assert foreign == ""
    writable = host.check_output(f"find {venv_dir} ! -type l -perm /022 | head -5")
    assert writable == ""
    assert int(host.check_output(f"find {venv_dir} -type f | wc -l")) > 1000


@pytest.mark.parametrize(
    "command",
    [
        "touch {site}/gpuhost_planted.pth",
        "touch {site}/sglang/__init__.py",
        "mkdir {venv}/bin/x",
        "mv {venv}/bin {venv}/bin.old",
        f"touch {VENVS}/planted",
        f"ln -sfn /tmp {LINK}",
        f"touch {UV_CACHE}/planted",
        f"ls {UV_CACHE}",
    ],
)
def test_service_account_cannot_change_the_venv_or_uv_cache(host, command, venv_dir, site):
    command = command.format(site=site, venv=venv_dir)
    with host.sudo(SERVICE_USER):
        result = host.run(command)
    assert result.rc != 0, f"{command} worked as {SERVICE_USER}"
    assert "Permission denied" in result.stderr


def test_venv_files_are_no_hard_links_into_a_service_writable_dir(host, venv_dir, site):
    # uv hard-links the venv's files from its cache when both lie on one filesystem: the
    # inode is shared, so a link in a directory the server can write would let it change
    # what root and the server run. No inode of the venv may have a link there.
    fmt = "'%D:%i\\n'"
    venv_inodes = set(host.check_output(f"find {venv_dir} -type f -links +1 -printf {fmt}").split())
    # uv's cache and the venvs share a filesystem here, as on a host's disk: hard links.
    assert len(venv_inodes) > 1000
    writable = set(
        host.check_output(
            f"find {' '.join(SERVICE_WRITABLE)} -type f -links +1 -printf {fmt} 2>/dev/null || true"
        ).split()
    )
    assert venv_inodes.isdisjoint(writable)
    # And a venv file's other links, where there are any, are root's (uv's cache).
    sample = host.check_output(f"find {site}/torch -type f -name '*.py' | head -1")
    assert host.file(sample).user == "root"


def test_uv_cache_is_root_only(host):
    f = host.file(UV_CACHE)
    assert f.is_directory
    assert (f.user, f.group) == ("root", "root")
    assert f.mode & 0o007 == 0


def test_uv_is_pinned_and_root_owned(host):
    assert host.check_output(f"{UV} --version").split()[1] == "0.9.30"
    assert host.file(UV).user == "root"


def test_uv_came_from_its_hashed_requirement(host):
    # Root installed uv with pip --require-hashes --only-binary :all: from the repository's
    # locks/uv-0.9.30.txt; its copy stays, root-owned, in the tool venv (pip refuses any file
    # whose sha256 it does not list).
    copy = host.file("/opt/gpuhost/uv/gpuhost-uv-requirements.txt")
    assert copy.user == "root" and copy.mode == 0o644
    text = copy.content_string
    assert re.search(r"(?m)^uv==0\.9\.30 ", text)
    assert len(set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))) >= 10


@pytest.mark.parametrize("path", CACHES)
def test_caches_writable_by_service_account(host, path):
    f = host.file(path)
    assert f.is_directory
    assert f.user == SERVICE_USER
    with host.sudo(SERVICE_USER):
        assert host.run(f"test -w {path}").rc == 0


def test_marker_names_the_lock_in_force(host, lock_pins, venv_dir):
    marker = json.loads(host.file(f"{venv_dir}/gpuhost-env.json").content_string)
    assert marker["lock_sha256"] == host.file(f"{venv_dir}/gpuhost-lock.txt").sha256sum
    assert marker["versions"] == {k: lock_pins[k] for k in STACK}
    assert marker["torch_cuda"] == "12.8"
    # No GPU here: check_env is recorded only where one is.
    assert marker["check_env"] == {}
