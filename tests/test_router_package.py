"""Which router role sglang_router runs (issue 33 item 1): smg, the SGLang Model Gateway, by
default, sglang-router 0.3.2 on request (sglang_router_package).

Unit tests: the one table of routers (gpuhost_router_args.IMPLEMENTATIONS) matches the
argument spec's choices and the defaults; a wrong package is refused naming the variable, the
value and the allowed values; each row's lock is in locks/, hashed, pins that release and is
the one vars/main.yml selects; smg's listeners and keys that no setting covers are refused in
sglang_router_extra_args; the /workers filters read smg's answer; the add call carries the
router's worker key only when it has one. The launcher and unit rendering for both packages
are in tests/test_argv_injection.py (with the real parsers of both wheels).

Wheel test (skipped with GPUHOST_SKIP_WHEEL_TESTS=1; its venvs under .cache/sglang-venvs/ are
made from the locks): each real router, smg and sglang-router, started through
gpuhost-router-launch with a keys file on stdin, in front of the SGLang stand-in
(tests/standin/, a test double) that requires the worker key: the worker API calls of
tasks/add_back.yml and tasks/drain.yml, in the shape those tasks send them, do what the role
waits for.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.filter import gpuhost_router as workers
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_router_args import (
    router_impl,
    router_package,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_python_env as pe
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_router_args as router
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_validate import (
    load_role_constraints,
    load_role_specs,
    validate,
)
from gpuhost_fakes import ROOT, template_env

ROLE = ROOT / "roles" / "sglang_router"
LAUNCHER = ROLE / "files" / "gpuhost-router-launch"
STANDIN = ROOT / "tests" / "standin" / "sglang_standin.py"


def _yaml(path):
    return yaml.safe_load(Path(path).read_text())


SPEC = _yaml(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
DEFAULTS = _yaml(ROLE / "defaults" / "main.yml")
VARS = _yaml(ROLE / "vars" / "main.yml")


# ---------------------------------------------------------------- the table and the variable


def test_choices_default_and_table_agree():
    package = SPEC["sglang_router_package"]
    assert package["choices"] == ["", *router.IMPLEMENTATIONS]
    # "" is decided on the host (below): smg on a new router host.
    assert package["default"] == DEFAULTS["sglang_router_package"] == ""
    assert router.DEFAULT_PACKAGE == "smg"
    assert SPEC["sglang_router_version"]["default"] == DEFAULTS["sglang_router_version"] == ""


def test_each_row_names_its_release_entry_and_flags():
    assert router.implementation("smg")["version"] == "1.13.0"
    assert router.implementation("smg")["entry"] == "smg.launch_router"
    assert router.implementation("sglang-router")["version"] == "0.3.2"
    assert router.implementation("sglang-router")["entry"] == "sglang_router.launch_router"
    for package in router.IMPLEMENTATIONS:
        assert set(router.implementation(package)["flags"]) == set(router.SETTINGS)
    # An explicit version wins over the pin, and names its own lock.
    assert router.implementation("smg", "1.14.0")["lock"] == "smg-1.14.0.txt"


def _errors(values):
    roles = str(ROOT / "roles")
    errors = validate(load_role_specs(roles, _yaml), load_role_constraints(roles, _yaml), values)
    return [e for e in errors[0] if "not set; allowed: required" not in e]


@pytest.mark.parametrize("value", ["haproxy", "sglang_router", "SMG", " smg"])
def test_a_wrong_package_is_refused_naming_variable_value_and_allowed(value):
    errors = [e for e in _errors({"sglang_router_package": value}) if "sglang_router_package" in e]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"sglang_router_package: got {value!r}"), errors[0]
    assert "smg" in errors[0] and "sglang-router" in errors[0], errors[0]
    assert "allowed" in errors[0], errors[0]


@pytest.mark.parametrize("package", sorted(router.IMPLEMENTATIONS))
def test_a_right_package_passes(package):
    assert not [e for e in _errors({"sglang_router_package": package}) if "sglang_router" in e]


def test_the_filter_refuses_a_wrong_package_naming_the_allowed():
    with pytest.raises(AnsibleFilterError, match=r"got 'x'; allowed: smg, sglang-router"):
        router_impl("x")


def test_a_version_with_a_space_or_newline_is_refused():
    for value in ("1.13.0 --host", "1.13.0\nx"):
        errors = [e for e in _errors({"sglang_router_version": value}) if "router_version" in e]
        assert errors, value


# ---------------------------------------------------------------- the locks


@pytest.mark.parametrize("package", sorted(router.IMPLEMENTATIONS))
def test_each_rows_lock_is_hashed_and_pins_its_release(package):
    impl = router.implementation(package)
    lock = ROOT / "locks" / impl["lock"]
    info = pe.lock_info(lock.read_text(), lock.name)  # raises on an unhashed pin
    assert info["pins"][pe.normalize(package)] == impl["version"]
    assert info["python"] == "3.11"
    source = lock.with_suffix(".in").read_text()
    assert f"{package}=={impl['version']}" in source.splitlines()
    # No torch and no CUDA on a router host.
    assert not {"torch", "nvidia-cuda-runtime-cu12"} & set(info["pins"])


def _render_var(name, values):
    """A vars/main.yml value as Ansible renders it: _sglang_router_impl from the filter."""
    env = template_env()
    impl = router_impl(values["sglang_router_package"] or "smg", values["sglang_router_version"])
    context = {"role_path": "/r/roles/sglang_router", "_sglang_router_impl": impl, **values}
    return env.from_string(VARS[name]).render(context).strip()


def test_vars_take_the_row_from_the_filter():
    assert VARS["_sglang_router_impl"] == (
        "{{ _sglang_router_package | gpuhost.gpu.router_impl(sglang_router_version) }}"
    )
    assert VARS["_sglang_router_package"] == (
        "{{ sglang_router_package | gpuhost.gpu.router_package }}"
    )


# ---------------------------------------------------------------- which router a host runs

# What the role's "Read what the router venv holds" prints (the venv's own Python), for a
# router an earlier gpuhost installed, one this gpuhost installed, and a host without a venv.
FREEZE_SGLANG_ROUTER = "sglang_router==0.3.2\nsetproctitle==1.3.6\naiohttp==3.12.15\n"
FREEZE_SMG = "smg==1.13.0\nuvloop==0.21.0\n"


@pytest.mark.parametrize(
    ("setting", "freeze", "chosen"),
    [
        ("", "", "smg"),  # a new router host
        ("", FREEZE_SMG, "smg"),
        # An earlier gpuhost's router keeps running what it runs: no swap under its clients.
        ("", FREEZE_SGLANG_ROUTER, "sglang-router"),
        ("", FREEZE_SGLANG_ROUTER.replace("sglang_router", "Sglang-Router"), "sglang-router"),
        # The inventory's word wins either way (a move in either direction is asked for).
        ("smg", FREEZE_SGLANG_ROUTER, "smg"),
        ("sglang-router", FREEZE_SMG, "sglang-router"),
        ("sglang-router", "", "sglang-router"),
        # A venv that holds neither (a broken or foreign one): a new install.
        ("", "six==1.17.0\n", "smg"),
    ],
)
def test_the_router_a_host_runs(setting, freeze, chosen):
    assert router.choose_package(setting, freeze) == chosen
    assert router_package(setting, freeze) == chosen


def test_preflight_decides_the_package_from_the_venv_before_anything_uses_it():
    """The venv is read and the package decided in preflight, before the lock check and the
    install that use _sglang_router_impl; install.yml reads the same registered result."""
    tasks = _yaml(ROLE / "tasks" / "preflight.yml")
    names = [t["name"] for t in tasks]
    read = names.index("Read what the router venv holds")
    decide = names.index("Decide which router this host runs")
    lock = names.index("Check that the lock file exists on the controller")
    assert read < decide < lock
    assert tasks[read]["register"] == "_sglang_router_freeze"
    assert tasks[read]["check_mode"] is False and tasks[read]["changed_when"] is False
    expr = tasks[decide]["ansible.builtin.set_fact"]["_sglang_router_package"]
    assert "gpuhost.gpu.router_package(_sglang_router_freeze.stdout" in expr
    install = (ROLE / "tasks" / "install.yml").read_text()
    assert "register: _sglang_router_freeze" not in install
    assert "_sglang_router_freeze.stdout" in install


@pytest.mark.parametrize(
    ("values", "lock"),
    [
        ({"sglang_router_package": "smg", "sglang_router_version": ""}, "smg-1.13.0.txt"),
        (
            {"sglang_router_package": "sglang-router", "sglang_router_version": ""},
            "sglang-router-0.3.2.txt",
        ),
        ({"sglang_router_package": "smg", "sglang_router_version": "1.12.0"}, "smg-1.12.0.txt"),
    ],
)
def test_the_variable_selects_the_lock(values, lock):
    rendered = _render_var("_sglang_router_lock", {**values, "sglang_router_lock_file": ""})
    assert rendered == f"/r/roles/sglang_router/../../locks/{lock}"
    own = _render_var("_sglang_router_lock", {**values, "sglang_router_lock_file": "/x/my.txt"})
    assert own == "/x/my.txt"


def test_the_pinned_locks_exist():
    for package in router.IMPLEMENTATIONS:
        assert (ROOT / "locks" / router.implementation(package)["lock"]).is_file()


# ---------------------------------------------------------------- smg's own listeners and keys


@pytest.mark.parametrize(
    "flag",
    [
        "--health-check-port",
        "--enable-mesh",
        "--mesh-host",
        "--mesh-port",
        "--mesh-peer-urls",
        "--rdma-listen-ip",
        "--tenant-api-key",
        "--health-check-p",  # an abbreviation argparse would expand
    ],
)
def test_smg_listeners_and_keys_are_refused_in_extra_args(flag):
    problem = router.extra_args_problem({flag: "1"})
    assert problem and flag in problem and "not supported" in problem, problem


def test_smg_tuning_flags_pass():
    extra = {"--worker-startup-timeout-secs": 600, "--upstream-http2": True, "--log-json": True}
    assert router.extra_args_problem(extra) is None


# ---------------------------------------------------------------- smg's worker API answers

# GET /workers of smg 1.13.0 here (the stand-in as the worker), trimmed to what the filters
# read plus `status`: a deleted worker stays listed, not healthy, while smg drains it.
SMG_WORKERS = {
    "workers": [
        {
            "id": "01a249d3-4700-718f-be6d-6caf96ba4d6a",
            "url": "http://127.0.0.1:31101",
            "is_healthy": True,
            "status": "ready",
        },
        {
            "id": "01a249d3-e505-7611-ac73-2692368d8314",
            "url": "http://127.0.0.1:31103",
            "is_healthy": False,
            "status": "draining",
        },
    ],
    "total": 2,
    "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": 2},
}


def test_filters_read_smgs_workers_answer():
    ids = workers.router_worker_ids(SMG_WORKERS, "http://127.0.0.1:31103/")
    assert ids == ["01a249d3-e505-7611-ac73-2692368d8314"]
    # A draining worker is still listed (the drain waits), and is not healthy (no re-add yet).
    assert workers.router_worker_ids(SMG_WORKERS, "http://127.0.0.1:31103", True) == []
    assert workers.router_worker_ids(SMG_WORKERS, "http://127.0.0.1:31101", True) == [
        "01a249d3-4700-718f-be6d-6caf96ba4d6a"
    ]


def _add_task():
    tasks = _yaml(ROLE / "tasks" / "add_back.yml")
    return next(t for t in tasks if t.get("ansible.builtin.uri", {}).get("method") == "POST")


@pytest.mark.parametrize(("key", "body"), [("", {}), ("k" * 20, {"api_key": "k" * 20})])
def test_the_add_call_carries_the_routers_worker_key_only_when_set(key, body):
    task = _add_task()
    env = template_env()
    env.filters["combine"] = lambda a, b: {**a, **b}
    rendered = env.from_string(
        "{{ (" + task["ansible.builtin.uri"]["body"].strip()[2:-2] + ") | tojson }}"
    ).render(
        {
            "sglang_router_worker": "http://10.0.0.1:30000",
            "item": {"item": "router1"},
            "_sglang_router_worker_keys": {"router1": key},
        }
    )
    assert json.loads(rendered) == {"url": "http://10.0.0.1:30000", **body}
    assert task["no_log"] == "{{ _sglang_router_hide }}"
    assert 409 in task["ansible.builtin.uri"]["status_code"]


def test_a_worker_key_alone_hides_the_worker_api_calls():
    tasks = _yaml(ROLE / "tasks" / "locate.yml")
    hide = next(t for t in tasks if "_sglang_router_hide" in t.get("ansible.builtin.set_fact", {}))
    assert "_sglang_router_worker_keys" in hide["ansible.builtin.set_fact"]["_sglang_router_hide"]


# ---------------------------------------------------------------- the real smg wheel

SKIP_WHEELS = pytest.mark.skipif(
    os.environ.get("GPUHOST_SKIP_WHEEL_TESTS") == "1", reason="GPUHOST_SKIP_WHEEL_TESTS=1"
)


def _free_ports(count):
    socks = [socket.socket() for _ in range(count)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for sock in socks:
        sock.close()
    return ports


def _call(method, url, key=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
            return answer.status, (json.loads(text) if text.startswith("{") else text)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, None


def _until(check, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    return check()


@SKIP_WHEELS
@pytest.mark.parametrize("package", sorted(router.IMPLEMENTATIONS))
def test_real_router_behind_the_launcher_adds_drains_and_readds_a_keyed_worker(tmp_path, package):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import sglang_catalogue
    finally:
        sys.path.pop(0)
    impl = router.implementation(package)
    venv = sglang_catalogue.ensure_venv(ROOT / "locks" / impl["lock"])
    worker_key, admin_key = "worker-key-0123456789", "admin-key-0123456789"
    port, prom, w1, w2 = _free_ports(4)
    env = {"PATH": os.defpath, "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    procs = []
    try:
        for wport in (w1, w2):
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(STANDIN), "--port", str(wport), "--api-key", worker_key],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        keys = tmp_path / "router.keys"
        keys.write_text(f"api_key={worker_key}\nadmin_key={admin_key}\n")
        flags = impl["flags"]
        argv = [
            str(venv / "bin" / "python"),
            str(LAUNCHER),
            f"--gpuhost-entry={impl['entry']}",
            f"--gpuhost-api-key-flag={flags['api_key']}",
            f"--gpuhost-admin-key-flag={flags['admin_keys']}",
            f"--gpuhost-worker-urls-flag={flags['worker_urls']}",
            *(flags["host"], "127.0.0.1", flags["port"], str(port)),
            *(flags["policy"], "round_robin"),
            *(flags["prometheus_host"], "127.0.0.1", flags["prometheus_port"], str(prom)),
            flags["worker_urls"],
            f"http://127.0.0.1:{w1}",
        ]
        log = tmp_path / "smg.log"
        with keys.open("rb") as stdin, log.open("wb") as out:
            smg = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=out, env=env)
        procs.append(smg)
        base = f"http://127.0.0.1:{port}"
        assert _until(lambda: _call("GET", base + "/liveness")[0] == 200, 60), log.read_text()
        # The keys are in argv only, each flag one word, never in the environment.
        cmdline = Path(f"/proc/{smg.pid}/cmdline").read_bytes().decode()
        assert worker_key not in cmdline and admin_key not in cmdline  # the kernel's argv
        environ = Path(f"/proc/{smg.pid}/environ").read_bytes().decode()
        assert worker_key not in environ and admin_key not in environ
        # The worker API needs the admin key; the serving path the client key.
        assert _call("GET", base + "/workers")[0] == 401
        assert _call("GET", base + "/workers", worker_key)[0] == 401

        def listed(url, healthy=False):
            status, data = _call("GET", base + "/workers", admin_key)
            assert status == 200, data
            return workers.router_worker_ids(data, url, healthy)

        first, second = f"http://127.0.0.1:{w1}", f"http://127.0.0.1:{w2}"
        assert _until(lambda: listed(first, True), 30)
        # add_back: POST with the router's worker key; 202, then healthy.
        status, data = _call(
            "POST", base + "/workers", admin_key, {"url": second, "api_key": worker_key}
        )
        assert status == 202, data
        assert _until(lambda: listed(second, True), 30), log.read_text()[-3000:]
        chat = {"model": "standin/model", "messages": [{"role": "user", "content": "2+2?"}]}
        assert _call("POST", base + "/v1/chat/completions", None, chat)[0] == 401
        for _ in range(4):  # round robin: both workers answer with the key
            assert _call("POST", base + "/v1/chat/completions", worker_key, chat)[0] == 200
        # drain: DELETE /workers/{id}; 202, listed (draining, not healthy) until it is gone.
        (worker_id,) = listed(second)
        status, data = _call("DELETE", f"{base}/workers/{worker_id}", admin_key)
        assert status == 202, data
        assert _until(lambda: not listed(second), 30), log.read_text()[-3000:]
        # Re-added by the same call, it is healthy again.
        status, data = _call(
            "POST", base + "/workers", admin_key, {"url": second, "api_key": worker_key}
        )
        assert status == 202, data
        assert _until(lambda: listed(second, True), 30)
        status, ready = _call("GET", base + "/readiness")
        assert status == 200 and ready["healthy_workers"] == 2, ready
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert shlex.join(argv).count("--gpuhost-") == 4
