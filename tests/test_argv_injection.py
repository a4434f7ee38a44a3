"""Option injection and the router's keys (issue 28 items 3, 4 and the router part of 8).

A value that argparse reads as an option (`--encoder-urls: [x, --host, 0.0.0.0]`,
`--model-checksum: "--host=0.0.0.0"`, a router extra flag or worker URL) would move the
server's or router's listener past its variables, its port rule and its key. Unit tests:
validation refuses those, naming the flag and value, and render_args never emits a value
that starts an option. Wheel tests (skipped with GPUHOST_SKIP_WHEEL_TESTS=1, like
tests/test_sglang_catalogue.py, whose venvs under .cache/sglang-venvs/ they share): the real
argparse of each pinned sglang (ServerArgs.add_cli_args) and of each pinned router, smg and
sglang-router (<module>.launch_router.parse_router_args), parse the rendered argv to the host
and port of the variables. The router launcher runs with a keys file on stdin and a stand-in
`<module>.launch_router` (a test double, written below) that records its
/proc/self/environ, argv and stdin: the keys appear only in argv, each flag one word.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_catalogue as catalogue
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_router_args as router
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate as validate
from gpuhost_fakes import template_env

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "roles" / "sglang_router" / "files" / "gpuhost-router-launch"
CONSTRAINTS = yaml.safe_load((ROOT / "roles/sglang_router/meta/constraints.yml").read_text())
VERSIONS = catalogue.available_versions()
LISTEN = {"host": "127.0.0.1", "port": 30123, "api_key_set": False, "api_key_valid": True}
PROFILE = yaml.safe_load((ROOT / "profiles" / "qwen3-8b-1x-48gb.yml").read_text())
# Flags of each shape argparse treats differently: a list (nargs '+'), an optional value
# (nargs '?'), a JSON mapping, a negative number.
SHAPES = {
    "--encoder-urls": ["http://10.0.0.5:8000", "http://10.0.0.6:8000"],
    "--model-checksum": "abc123",
    "--json-model-override-args": {"rope_scaling": {"factor": 2.0}},
}
ATTACKS = [
    ("--encoder-urls", ["x", "--host", "0.0.0.0", "--port", "8000"], "'--host'"),
    ("--encoder-urls", ["x", "--port=8000"], "'--port=8000'"),
    ("--model-checksum", "--host=0.0.0.0", "'--host=0.0.0.0'"),
    ("--model-checksum", "-h", "'-h'"),
]
SKIP_WHEELS = pytest.mark.skipif(
    os.environ.get("GPUHOST_SKIP_WHEEL_TESTS") == "1", reason="GPUHOST_SKIP_WHEEL_TESTS=1"
)


def _effective(flags):
    return profile.resolve({**PROFILE, "flags": {**PROFILE.get("flags", {}), **flags}}, {})


# --- (a) the server: validation and rendering ------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("flag", "value", "shown"), ATTACKS)
def test_validation_refuses_a_value_argparse_reads_as_an_option(version, flag, value, shown):
    cat = catalogue.load_catalogue(version)
    # As an inventory override (sglang_server_flags) and inside the profile file itself:
    # resolve() merges both into the one set of flags validate() checks.
    for effective in (
        profile.resolve(PROFILE, {"flags": {flag: value}}),
        _effective({flag: value}),
    ):
        result = profile.validate(effective, cat, gpu={}, listen=LISTEN)
        lines = [e for e in result["errors"] if flag in e and shown in e]
        assert lines, result["errors"]
        assert "allowed: a value that does not start with '-'" in lines[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_negative_numbers_and_plain_values_pass(version):
    cat = catalogue.load_catalogue(version)
    flags, _, errors, _ = profile.check_flags(cat, SHAPES)
    assert errors == [] and flags == SHAPES


def test_render_never_emits_a_value_that_starts_an_option():
    eff = _effective({})
    with pytest.raises(ValueError, match=r"--encoder-urls.*'--host'"):
        profile.render_args(eff, {"--encoder-urls": ["x", "--host", "0.0.0.0"]}, LISTEN)
    args = profile.render_args(
        eff, {"--model-checksum": "--host=0.0.0.0", "--x": -1.5, "--y": -3}, LISTEN
    )
    # One word each: argparse reads the text after '=' as the flag's value.
    assert "--model-checksum=--host=0.0.0.0" in args and "--x=-1.5" in args
    assert "--y=-3" in args
    assert [a for a in args if a in ("--host", "--port")] == ["--host", "--port"]
    assert not any(a.startswith(("--host=", "--port=")) for a in args)


def test_option_like_is_argparse_exact():
    assert catalogue.option_like("--host") and catalogue.option_like("-h")
    assert catalogue.option_like("-1e5")  # not a negative number to Python 3.11's argparse
    assert not catalogue.option_like("-1") and not catalogue.option_like("-.5")
    assert not catalogue.option_like("http://x") and not catalogue.option_like("")


# --- (a) the router: extra flags and worker URLs ---------------------------------------


def _constraint(name, value):
    """The router's constraint for `name`, checked by gpuhost_validate as validate does."""
    try:
        validate._check_constraint(value, CONSTRAINTS["variables"][name])
    except validate.Invalid as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        ({"--host": "0.0.0.0"}, "--host is a listen"),
        ({"--hos": "0.0.0.0"}, "--hos abbreviates --host"),
        ({"--prometheus-h": "0.0.0.0"}, "abbreviates --prometheus-host"),
        ({"--worker-urls": "http://evil:1"}, "--worker-urls is"),
        ({"--api-key": "k"}, "sglang_router_worker_api_key"),
        ({"--control-plane-api-keys": "a:b:admin:k"}, "sglang_router_admin_api_key"),
        ({"--log-level": "--host=0.0.0.0"}, "--log-level '--host=0.0.0.0'"),
        ({"--cors-allowed-origins": ["a", "--port"]}, "got a list"),
        ({"--x=1": True}, "key '--x=1'"),
    ],
)
def test_router_extra_args_refused(extra, shown):
    problem = _constraint("sglang_router_extra_args", extra)
    assert problem and shown in problem, problem


def test_router_extra_args_allowed():
    extra = {"--request-timeout-secs": 600, "--log-level": "info; rm -rf /", "--x": -1}
    assert _constraint("sglang_router_extra_args", {**extra, "--dp-aware": True}) is None


@pytest.mark.parametrize(
    "url",
    ["http://x --host 0.0.0.0", "--host", 'http://x"', "http://$HOME:1", "ftp://x", "http://"],
)
def test_router_worker_url_refused(url):
    for name, value in (("sglang_router_worker_url", url), ("sglang_router_worker_urls", [url])):
        problem = _constraint(name, value)
        assert problem and "http(s) URL" in problem, (name, problem)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:30000", "https://gpu-1.example.org/v1", "http://[fd00::1]:30000"]
)
def test_router_worker_url_allowed(url):
    assert _constraint("sglang_router_worker_urls", [url]) is None
    assert router.worker_url_problem(url) is None


PACKAGES = sorted(router.IMPLEMENTATIONS)


def _router_unit(extra=None, package=router.DEFAULT_PACKAGE):
    path = ROOT / "roles" / "sglang_router" / "templates" / "sglang-router.service.j2"
    values = {
        "ansible_managed": "managed",
        "_sglang_router_impl": router.implementation(package),
        "_sglang_router_worker_urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"],
        "gpuhost_service_user": "gpuhost",
        "gpuhost_service_group": "gpuhost",
        "gpuhost_config_dir": "/etc/gpuhost",
        "sglang_router_service_name": "sglang-router",
        "sglang_router_venv": "/opt/gpuhost/router-venv",
        "sglang_router_host": "10.1.2.3",
        "sglang_router_port": 31001,
        "sglang_router_policy": "round_robin",
        "sglang_router_prometheus_host": "127.0.0.1",
        "sglang_router_prometheus_port": 29001,
        "sglang_router_extra_args": extra or {},
        "sglang_router_timeout_stop_sec": 300,
        "_sglang_router_firewall": True,
        "_sglang_router_keys_path": "/etc/gpuhost/sglang-router.keys",
    }
    return env_render(path, values)


def env_render(path, values):
    return template_env().from_string(path.read_text()).render(values)


def _router_argv(unit, urls):
    """ExecStart as systemd runs it: quoted words, $SGLANG_ROUTER_WORKER_URLS split."""
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))[len("ExecStart=") :]
    words = shlex.split(line.replace("%%", "%"))
    index = words.index("$SGLANG_ROUTER_WORKER_URLS")
    return words[2:index] + urls + words[index + 1 :]


def test_router_unit_hands_the_keys_over_on_stdin():
    unit = _router_unit()
    assert "StandardInput=file:/etc/gpuhost/sglang-router.keys" in unit
    assert "StandardOutput=journal" in unit and "StandardError=journal" in unit
    assert "secrets.env" not in unit
    keys = (ROOT / "roles/sglang_router/templates/sglang-router.keys.j2").read_text()
    text = env_render_text(
        keys, {"sglang_router_worker_api_key": "-w", "sglang_router_admin_api_key": "-a"}
    )
    assert {"api_key=-w", "admin_key=-a"} <= set(text.splitlines())


def env_render_text(text, values):
    return template_env().from_string(text).render({"ansible_managed": "managed", **values})


def test_router_tasks_migrate_the_old_secrets_file():
    tasks = ROOT / "roles" / "sglang_router" / "tasks"
    run = yaml.safe_load((tasks / "run.yml").read_text())
    removed = [t for t in run if t.get("ansible.builtin.file", {}).get("state") == "absent"]
    assert (
        removed and "_sglang_router_old_secrets_path" in removed[0]["ansible.builtin.file"]["path"]
    )
    configure = yaml.safe_load((tasks / "configure.yml").read_text())
    keys = [
        t
        for t in configure
        if t.get("ansible.builtin.template", {}).get("src") == "sglang-router.keys.j2"
    ]
    assert keys and keys[0]["ansible.builtin.template"]["mode"] == "0600" and keys[0]["no_log"]
    variables = yaml.safe_load((ROOT / "roles/sglang_router/vars/main.yml").read_text())
    assert variables["_sglang_router_old_secrets_path"].endswith("-secrets.env")


# --- (c) the router launcher: keys on stdin, never in the environment ------------------

# A test double of <module>.launch_router (smg, sglang_router): records what the router would
# have been given (its argv, its kernel environ, what its stdin is, which module ran) and exits.
STANDIN = textwrap.dedent(
    """
    # Test double of <module>.launch_router (tests/test_argv_injection.py).
    import json, os, sys
    with open("/proc/self/environ", "rb") as handle:
        environ = handle.read().decode("utf-8", "replace")
    record = {
        "module": __spec__.name,
        "argv": sys.argv,
        "environ": environ,
        "os_environ": dict(os.environ),
        "stdin": os.readlink("/proc/self/fd/0"),
    }
    with open(os.environ["RECORD"], "w") as out:
        json.dump(record, out)
    """
)
WORKER_KEY = "-worker-key-starts-with-a-dash"
ADMIN_KEY = "--admin:key=with-colons"


def run_launcher(tmp_path, argv, keys_text, env=None):
    for module in ("smg", "sglang_router"):
        package = tmp_path / "standin" / module
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("# test double package\n")
        (package / "launch_router.py").write_text(STANDIN)
    keys = tmp_path / "router.keys"
    keys.write_text(keys_text)
    record = tmp_path / "record.json"
    environment = {
        "PATH": os.defpath,
        "PYTHONPATH": str(tmp_path / "standin"),
        "RECORD": str(record),
        **(env or {}),
    }
    with keys.open("rb") as stdin:
        proc = subprocess.run(
            [sys.executable, str(LAUNCHER), *argv],
            stdin=stdin,
            env=environment,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    return proc, (json.loads(record.read_text()) if record.exists() else None)


def _keys_text():
    return f"# managed\napi_key={WORKER_KEY}\nadmin_key={ADMIN_KEY}\n"


def _own(package=router.DEFAULT_PACKAGE):
    """The launcher's own leading words for `package`, as the unit renders them."""
    impl = router.implementation(package)
    return [
        f"--gpuhost-entry={impl['entry']}",
        f"--gpuhost-api-key-flag={impl['flags']['api_key']}",
        f"--gpuhost-admin-key-flag={impl['flags']['admin_keys']}",
        f"--gpuhost-worker-urls-flag={impl['flags']['worker_urls']}",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_unit_names_the_launcher_entry_and_flags_of_the_package(package):
    impl = router.implementation(package)
    argv = _router_argv(_router_unit(package=package), ["http://10.0.0.1:30000"])
    assert argv[:4] == _own(package)
    assert impl["entry"] == {"smg": "smg.launch_router"}.get(package, "sglang_router.launch_router")
    flags = impl["flags"]
    rest = argv[4:]
    for key, value in (
        ("host", "10.1.2.3"),
        ("port", "31001"),
        ("policy", "round_robin"),
        ("prometheus_host", "127.0.0.1"),
        ("prometheus_port", "29001"),
    ):
        assert rest[rest.index(flags[key]) + 1] == value, (key, rest)
    assert rest[-2:] == [flags["worker_urls"], "http://10.0.0.1:30000"]
    unit = _router_unit(package=package)
    assert f"Description={package} {impl['version']} (gpuhost): fronts 2 SGLang worker(s)" in unit


@pytest.mark.parametrize("package", PACKAGES)
def test_launcher_keys_only_in_argv(tmp_path, package):
    argv = _router_argv(_router_unit(package=package), ["http://10.0.0.1:30000"])
    proc, record = run_launcher(tmp_path, argv, _keys_text())
    assert proc.returncode == 0, proc.stderr
    assert record["module"] == router.implementation(package)["entry"]
    # The launcher's own words are not passed on; the keys come last, one word each.
    assert record["argv"][1:] == [
        *argv[4:],
        f"--api-key={WORKER_KEY}",
        f"--control-plane-api-keys=gpuhost:gpuhost:admin:{ADMIN_KEY}",
    ]
    for key in (WORKER_KEY, ADMIN_KEY):
        assert key not in record["environ"] and key not in json.dumps(record["os_environ"])
    assert record["stdin"] == "/dev/null"
    assert WORKER_KEY not in proc.stderr + proc.stdout


def test_launcher_refuses_a_worker_word_that_is_not_a_url(tmp_path):
    proc, record = run_launcher(
        tmp_path,
        [*_own(), "--worker-urls", "http://10.0.0.1:1", "--host", "0.0.0.0"],
        _keys_text(),
    )
    assert proc.returncode == 2 and record is None
    assert "'--host' is not an http(s) URL" in proc.stderr


def test_launcher_refuses_a_malformed_keys_file_without_echoing_it(tmp_path):
    proc, record = run_launcher(tmp_path, [*_own(), "--worker-urls", "http://x:1"], "secretvalue\n")
    assert proc.returncode == 2 and record is None
    assert "line 1" in proc.stderr and "secretvalue" not in proc.stderr


@pytest.mark.parametrize(
    ("own", "shown"),
    [
        ([], "missing --gpuhost-entry"),  # a unit of an older gpuhost
        (_own()[1:], "missing --gpuhost-entry"),
        (["--gpuhost-entry=os.system", *_own()[1:]], "not a MODULE.launch_router name"),
        ([*_own()[:3], "--gpuhost-worker-urls-flag=x"], "not a long flag"),
        ([*_own(), "--gpuhost-entry=smg.launch_router"], "'--gpuhost-entry': not one of"),
    ],
)
def test_launcher_refuses_missing_or_malformed_own_words(tmp_path, own, shown):
    proc, record = run_launcher(tmp_path, [*own, "--worker-urls", "http://x:1"], _keys_text())
    assert proc.returncode == 2 and record is None, proc.stderr
    assert shown in proc.stderr
    assert WORKER_KEY not in proc.stderr


# --- (b, c) the real argparse of the pinned wheels -------------------------------------


def _tool():
    spec = importlib.util.spec_from_file_location(
        "sglang_catalogue", ROOT / "tools/sglang_catalogue.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _venv_python(lock):
    return str(_tool().ensure_venv(lock) / "bin" / "python")


def _run_in(python, script, argv, tmp_path):
    """`script` in that venv's python, argv as JSON on stdin, its JSON answer back."""
    env = {
        "PATH": os.defpath,
        "HOME": str(tmp_path),
        "PYTHONNOUSERSITE": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    proc = subprocess.run(
        [python, "-W", "ignore", "-c", script],
        input=json.dumps(argv),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


SERVER_PARSE = textwrap.dedent(
    """
    import argparse, json, sys
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(json.loads(sys.stdin.read()))
    keys = ("host", "port", "encoder_urls", "model_checksum", "json_model_override_args")
    print(json.dumps({k: getattr(ns, k, None) for k in keys}))
    """
)


def _server_lock(version):
    locks = [p for p in (ROOT / "locks").glob(f"sglang-{version}-*.txt")]
    assert len(locks) == 1, locks
    return locks[0]


@SKIP_WHEELS
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_server_argv_parses_to_the_listen_variables(version, tmp_path):
    cat = catalogue.load_catalogue(version)
    eff = _effective(SHAPES)
    result = profile.validate(eff, cat, gpu={}, listen=LISTEN)
    flags = {k: v for k, v in result["flags"].items() if k in SHAPES}
    assert flags == SHAPES, result["errors"]
    python = _venv_python(_server_lock(version))
    plain = profile.render_args(eff, flags, LISTEN)
    # render_args alone (no validation before it) keeps a dash-led optional value its own.
    attack = profile.render_args(eff, {**flags, "--model-checksum": "--host=0.0.0.0"}, LISTEN)
    for argv, checksum in ((plain, "abc123"), (attack, "--host=0.0.0.0")):
        got = _run_in(python, SERVER_PARSE, argv, tmp_path)
        assert (got["host"], got["port"]) == (LISTEN["host"], LISTEN["port"]), (argv, got)
        assert got["encoder_urls"] == SHAPES["--encoder-urls"]
        assert got["model_checksum"] == checksum
        assert json.loads(got["json_model_override_args"]) == SHAPES["--json-model-override-args"]


ROUTER_PARSE = textwrap.dedent(
    """
    import argparse, importlib, json, sys
    data = json.loads(sys.stdin.read())
    module = data["entry"].rpartition(".")[0]
    parse_router_args = importlib.import_module(module + ".launch_router").parse_router_args
    RouterArgs = importlib.import_module(module + ".router_args").RouterArgs
    args = parse_router_args(data["argv"])
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    options = {o: a.dest for a in parser._actions for o in a.option_strings}
    keys = ("host", "port", "policy", "prometheus_host", "prometheus_port", "worker_urls",
            "api_key", "control_plane_api_keys")
    out = {k: getattr(args, k) for k in keys}
    out["options"] = options
    print(json.dumps(out, default=list))
    """
)


# Options of each release that open a listener or take a key no gpuhost setting covers
# (smg 1.13.0's --help: "Dedicated port for liveness/readiness/health probes", the mesh
# server, the RDMA lane's listener, per-tenant serving keys).
UNCOVERED_DESTS = {
    "smg": {
        "health_check_port",
        "enable_mesh",
        "mesh_host",
        "mesh_port",
        "mesh_advertise_host",
        "mesh_peer_urls",
        "rdma_listen_ip",
        "tenant_api_key",
    },
    "sglang-router": set(),
}


@SKIP_WHEELS
@pytest.mark.parametrize("package", PACKAGES)
def test_router_argv_from_the_launcher_parses_with_the_real_router(tmp_path, package):
    impl = router.implementation(package)
    urls = ["http://10.0.0.1:30000", "http://[fd00::2]:30000"]
    argv = _router_argv(_router_unit({"--request-timeout-secs": 600}, package), urls)
    proc, record = run_launcher(tmp_path, argv, _keys_text())
    assert proc.returncode == 0, proc.stderr
    assert record["module"] == impl["entry"]
    python = _venv_python(ROOT / "locks" / impl["lock"])
    got = _run_in(
        python, ROUTER_PARSE, {"entry": impl["entry"], "argv": record["argv"][1:]}, tmp_path
    )
    assert (got["host"], got["port"], got["policy"]) == ("10.1.2.3", 31001, "round_robin")
    assert (got["prometheus_host"], got["prometheus_port"]) == ("127.0.0.1", 29001)
    assert got["worker_urls"] == urls
    assert got["api_key"] == WORKER_KEY
    assert got["control_plane_api_keys"] == [["gpuhost", "gpuhost", ADMIN_KEY, "admin"]]
    # Every flag of the table is this parser's, for the setting it carries.
    dests = {key: key for key in impl["flags"]} | {"admin_keys": "control_plane_api_keys"}
    for key, flag in impl["flags"].items():
        assert got["options"].get(flag) == dests[key], (package, key, flag)
    # Every option of the real router that sets a listen, worker or key setting, or opens a
    # listener or takes a key no setting covers, is reserved; nothing else of it is.
    wanted = set(dests.values()) | UNCOVERED_DESTS[package]
    wanted = {o for o, dest in got["options"].items() if dest in wanted}
    reserved = {o for o in got["options"] if o in router.RESERVED}
    assert wanted == reserved, wanted ^ reserved
    # No option of it is refused as an abbreviation of a reserved one.
    assert not [o for o in got["options"] if o not in reserved and router._reserved_for(o)]
