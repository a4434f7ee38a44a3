"""One-place validation: the pure logic, every role's defaults, and the bad-input corpus run
through the real ansible-playbook (playbooks/preflight.yml on localhost, connection local)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_validate import (
    Invalid,
    convert,
    load_role_constraints,
    load_role_specs,
    plain_defaults,
    plain_text_secrets,
    rule_names,
    secret_names,
    select,
    validate,
)
from gpuhost_fakes import ROOT, run_playbook

BAD = sorted((ROOT / "tests" / "fixtures" / "bad-inputs").glob("*.yml"))


def _load(path):
    return yaml.safe_load(Path(path).read_text())


SPECS = load_role_specs(str(ROOT / "roles"), _load)
CONSTRAINTS = load_role_constraints(str(ROOT / "roles"), _load)


def errors_for(values, specs=None, constraints=None):
    errors = validate(SPECS if specs is None else specs, constraints or CONSTRAINTS, values)[0]
    if specs is None:
        # The shared gpuhost_* settings are required by role base; these tests leave them out.
        errors = [e for e in errors if "not set; allowed: required" not in e]
    return errors


# ---------------------------------------------------------------- pure logic


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("8", "int", 8),
        (8.0, "int", 8),
        ("0.5", "float", 0.5),
        (1, "float", 1.0),
        ("yes", "bool", True),
        ("off", "bool", False),
        (5, "str", "5"),
        ([1], "list", [1]),
        ({"a": 1}, "dict", {"a": 1}),
        ("x", "raw", "x"),
    ],
)
def test_convert_accepts(value, kind, expected):
    assert convert(value, kind) == expected


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("eight", "int"),
        (True, "int"),
        (8.5, "int"),
        ([8], "int"),
        ("nan", "float"),
        ("x", "float"),
        ("sometimes", "bool"),
        (None, "str"),
        (["a"], "str"),
        (True, "path"),
        ("a,b", "list"),
        ([], "dict"),
    ],
)
def test_convert_rejects(value, kind):
    with pytest.raises(Invalid):
        convert(value, kind)


def test_all_roles_are_read_including_later_ones(tmp_path):
    for role in ("alpha", "beta"):
        meta = tmp_path / role / "meta"
        meta.mkdir(parents=True)
        (meta / "argument_specs.yml").write_text(
            f"argument_specs:\n  main:\n    options:\n      {role}_level:\n"
            "        type: str\n        choices: [low, high]\n"
        )
    (tmp_path / "no_meta").mkdir()
    specs = load_role_specs(str(tmp_path), _load)
    assert set(specs) == {"alpha", "beta"}
    errors = errors_for({"beta_level": "mid"}, specs=specs, constraints={})
    assert errors == ["beta_level: got 'mid'; allowed: one of low, high (role beta argument_specs)"]


def test_message_names_variable_value_and_allowed():
    errors = errors_for({"sglang_server_port": 70000, "preflight_command_timeout": 0})
    assert (
        "preflight_command_timeout: got 0; allowed: a number >= 1 and <= 600 "
        "(roles/preflight/meta/constraints.yml)" in errors
    )
    assert any(
        e.startswith("sglang_server_port: got 70000; allowed: a number >= 1") for e in errors
    )


def test_required_without_default():
    specs = {"r": {"r_thing": {"type": "str", "required": True}}}
    assert errors_for({}, specs=specs, constraints={}) == [
        "r_thing: not set; allowed: required by role r"
    ]


def test_list_elements_and_choices_on_lists():
    specs = {"r": {"r_modes": {"type": "list", "elements": "str", "choices": ["a", "b"]}}}
    assert errors_for({"r_modes": ["a", "c"]}, specs=specs, constraints={}) == [
        "r_modes: got ['a', 'c']; allowed: one of a, b (each item) (role r argument_specs)"
    ]
    specs = {"r": {"r_codes": {"type": "list", "elements": "int"}}}
    assert "a list of an integer" in errors_for({"r_codes": ["x"]}, specs=specs, constraints={})[0]


def test_secrets_are_never_echoed():
    specs = {"r": {"r_api_key": {"type": "int", "no_log": True}}}
    errors = errors_for({"r_api_key": "s3cr3t-value"}, specs=specs, constraints={})
    assert errors and "s3cr3t" not in errors[0] and "<hidden>" in errors[0]
    constraints = {"variables": {"x_token": {"pattern": "[a-z]+"}}}
    errors = errors_for({"x_token": "ABC-123"}, specs={}, constraints=constraints)
    assert "ABC" not in errors[0]


def test_rules_apply_only_when_all_variables_are_set():
    assert errors_for({"sglang_server_tp_size": 3}) == []
    assert errors_for({"sglang_server_tp_size": 3, "preflight_expected_gpu_count": 0}) == []
    errors = errors_for({"sglang_server_tp_size": 4, "preflight_expected_gpu_count": 8})
    assert errors == []


def test_rule_skips_variables_with_type_errors():
    errors = errors_for({"sglang_server_tp_size": "all", "preflight_expected_gpu_count": 8})
    assert len(errors) == 1 and errors[0].startswith("sglang_server_tp_size: got 'all'")


def test_mapping_keys():
    errors = errors_for({"sglang_server_flags": {"--mem-fraction-static": "lots"}})
    assert "'--mem-fraction-static' a number" in errors[0]
    assert errors_for({"sglang_server_flags": {"--mem-fraction-static": 0.88}}) == []
    assert errors_for({"sglang_server_flags": {"--mem-fraction-static": None}}) == []


def test_flags_with_a_variable_of_their_own_are_refused_by_the_first_check():
    for flag, variable in (
        ("--port", "sglang_server_port"),
        ("--tp-size", "sglang_server_tp_size"),
    ):
        (error,) = errors_for({"sglang_server_flags": {flag: 2}})
        assert error.startswith("sglang_server_flags: got {"), error
        assert f"allowed: no {flag} (it is set through {variable}" in error, error


def test_mapping_key_pattern():
    errors = errors_for({"nccl_env_overrides": {"NCLL_MIN_CTAS": "8"}})
    assert len(errors) == 1 and "nccl_env_overrides" in errors[0]
    assert "'NCLL_MIN_CTAS' is not allowed" in errors[0]
    ok = {"NCCL_MIN_CTAS": "8", "disable_custom_all_reduce": True, "NCCL_P2P_LEVEL": None}
    assert errors_for({"nccl_env_overrides": ok}) == []


def test_unknown_role_variable_is_a_warning_with_a_suggestion():
    _, warnings, _ = validate(SPECS, CONSTRAINTS, {"preflight_expected_gpu_cont": 8})
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "preflight_expected_gpu_cont: not declared by any role's argument_specs; "
        "did you mean preflight_expected_gpu_count"
    )


def test_unknown_rule_kind_is_reported():
    errors = errors_for({}, specs={}, constraints={"rules": [{"name": "x", "kind": "bogus"}]})
    assert errors == ["constraints: rule x has unknown kind 'bogus'"]


def _plain(value):
    """A templated value: rendered and checked at run time, not here."""
    return "{{" in str(value)


@pytest.mark.parametrize("role", sorted(SPECS))
def test_every_role_default_passes_its_own_validation(role):
    """Defaults are valid input: a role cannot ship a default that preflight rejects."""
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = (_load(path) if path.exists() else None) or {}
    values = {k: v for k, v in defaults.items() if not _plain(v) and not str(k).startswith("_")}
    assert errors_for(values) == []


def test_group_vars_pass_validation():
    values = {}
    for path in sorted((ROOT / "group_vars" / "all").glob("*.yml")):
        values.update(_load(path) or {})
    values = {k: v for k, v in values.items() if not _plain(v)}
    assert errors_for(values) == []


def test_constraints_name_only_variables_that_exist_or_are_typed():
    declared = {name for options in SPECS.values() for name in options}
    for name, rule in CONSTRAINTS["variables"].items():
        assert name in declared or "type" in rule, f"{name}: no role declares it and no type given"


def test_constraints_live_with_their_role():
    """Each role's meta/constraints.yml constrains only that role's variables (the shared
    gpuhost_* settings belong to base) and its rules read at least one of them."""
    for name, rule in CONSTRAINTS["variables"].items():
        role = rule["role"]
        assert name.startswith(f"{role}_") or (role == "base" and name.startswith("gpuhost_")), name
        assert rule["source"] == f"roles/{role}/meta/constraints.yml"
    for rule in CONSTRAINTS["rules"]:
        prefixes = (f"{rule['role']}_",) + (("gpuhost_",) if rule["role"] == "base" else ())
        assert any(n.startswith(prefixes) for n in rule_names(rule)), rule["name"]


def test_sub_options_are_checked_by_ansible_core():
    errors = errors_for({"nccl_verify_thresholds": {"nvlnk": {"min_busbw_gbps": 1}}})
    assert errors == [
        "nccl_verify_thresholds: got {'nvlnk': {'min_busbw_gbps': 1}}; allowed: a mapping with "
        "keys from nvlink, pcie_no_p2p, pcie_p2p (role nccl argument_specs)"
    ]
    bad = {"nvlink": {"min_busbw_gbps": "fast"}}
    assert "a mapping with keys from" in errors_for({"nccl_verify_thresholds": bad})[0]
    good = {"nvlink": {"min_busbw_gbps": 40, "max_latency_us": 100}}
    assert errors_for({"nccl_verify_thresholds": good}) == []


def test_version_inside_its_branch():
    errors = errors_for({"nvidia_driver_branch": 580, "nvidia_driver_version": "570.1.2"})
    assert errors == [
        "nvidia_driver_version: got '570.1.2'; allowed: a version inside nvidia_driver_branch "
        "(580), i.e. 580.<n> - the version pins a release of the branch the packages are named "
        "after (roles/nvidia_driver/meta/constraints.yml rule nvidia_driver_version_in_branch)"
    ]
    assert errors_for({"nvidia_driver_branch": 580, "nvidia_driver_version": "580.95.05"}) == []
    assert errors_for({"nvidia_driver_branch": 580, "nvidia_driver_version": ""}) == []
    errors = errors_for(
        {"cuda_toolkit_version": "12.8", "cuda_toolkit_package_version": "12.9.1-1"}
    )
    assert len(errors) == 1 and errors[0].startswith("cuda_toolkit_package_version: got '12.9.1-1'")


def test_router_rules():
    errors = errors_for({"sglang_router_port": 30000, "sglang_router_prometheus_port": 30000})
    assert len(errors) == 1 and errors[0].startswith("sglang_router_prometheus_port: got 30000")
    errors = errors_for({"sglang_router_host": "0.0.0.0", "sglang_router_admin_api_key": ""})
    assert len(errors) == 1 and errors[0].startswith("sglang_router_admin_api_key: got ''")
    assert (
        errors_for({"sglang_router_host": "0.0.0.0", "sglang_router_admin_api_key": "k" * 20}) == []
    )


def test_metrics_rules():
    errors = errors_for({"metrics_node_exporter_port": 9400, "metrics_gpu_exporter_port": 9400})
    assert len(errors) == 1 and errors[0].startswith("metrics_node_exporter_port: got 9400")
    errors = errors_for({"metrics_listen_address": "0.0.0.0", "metrics_monitoring_cidrs": []})
    assert len(errors) == 1 and errors[0].startswith("metrics_monitoring_cidrs: got []")
    assert "not authenticated" in errors[0]
    assert errors_for({"metrics_listen_address": "127.0.0.1", "metrics_monitoring_cidrs": []}) == []
    opened = {"metrics_listen_address": "0.0.0.0", "metrics_monitoring_cidrs": ["10.0.0.0/8"]}
    assert errors_for(opened) == []


def test_a_role_checks_its_own_variables_with_the_shared_constraints():
    specs, constraints = select(SPECS, CONSTRAINTS, ["nccl"])
    assert set(specs) == {"nccl"}
    # gpuhost_base_dir is declared by nccl and constrained by base: the pattern still applies.
    errors = validate(specs, constraints, {"gpuhost_base_dir": "opt", "sglang_server_port": 0})[0]
    errors = [e for e in errors if "not set; allowed: required" not in e]
    assert errors == [
        "gpuhost_base_dir: got 'opt'; allowed: an absolute path (roles/base/meta/constraints.yml)"
    ]
    assert {r["name"] for r in constraints["rules"]} == {"nccl_sweep_range"}


# ---------------------------------------------------------------- the corpus, for real


def _expected(path):
    match = re.search(r"^# expect: (\S+)$", path.read_text(), re.M)
    assert match, f"{path.name} must say which variable it breaks (# expect: <name>)"
    return match.group(1)


def test_corpus_is_big_enough():
    assert len(BAD) >= 15


def _run_preflight(*extra):
    return run_playbook(
        ["playbooks/preflight.yml", "-i", "inventory/local", *extra],
        ROOT / ".cache" / "test-facts",
    )


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_input_fails_before_any_change(path):
    proc = _run_preflight("-e", f"@{path}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+).*failed=(\d+)", out)
    assert recap, out
    assert recap.group(2) == "0", out
    assert recap.group(3) == "1", out
    # Stopped by the validation task, the play's first, naming the variable.
    assert "nothing was changed" in out, out
    assert re.search(rf"^{re.escape(_expected(path))}: got ", out, re.M), out
    assert "Read GPU, driver, topology and host facts" not in out


def test_good_input_passes_with_no_change():
    """Validation passes and nothing changes. On a machine not booted with systemd (a
    container, as CI's may be) preflight's gate then stops on preflight.systemd alone."""
    # The managed Python fits any controller's (this play runs on the controller itself).
    proc = _run_preflight(
        "-e", "preflight_expected_gpu_count=0", "-e", "python_env_python_source=managed"
    )
    out = proc.stdout + proc.stderr
    words = " ".join(out.split())
    # Validation ran and passed (the profile_tasks line between the task and its result).
    assert re.search(
        r"TASK \[Validate every gpuhost setting before any change\] \**\n.*\nok: \[localhost\]", out
    ), out
    if Path("/run/systemd/system").is_dir():
        assert proc.returncode == 0, out
        assert re.search(r"localhost\s+: ok=\d+\s+changed=0 .*failed=0", out), out
    else:
        assert proc.returncode == 2, out
        assert re.search(r"localhost\s+: ok=\d+\s+changed=0 .*failed=1", out), out
        assert re.findall(r"'?FAIL (\S+)", words) == ["preflight.systemd"], words


# ---------------------------------------------------------------- every playbook, any tag

# The plays other playbooks import and nobody runs alone: validation, and this run's host
# facts (playbooks/facts.yml, imported after validation or preflight).
BUILDING_BLOCKS = ("validate.yml", "facts.yml")
PLAYBOOKS = sorted(
    p.name for p in (ROOT / "playbooks").glob("*.yml") if p.name not in BUILDING_BLOCKS
)
# One tag of each playbook's own stage: the run selects it and still stops in validation.
STAGE_TAG = {
    "adopt.yml": "adopt",
    "adopt_apply.yml": "server",
    "bench.yml": "bench",
    "doctor.yml": "doctor",
    "metrics.yml": "metrics",
    "host.yml": "driver",
    "preflight.yml": "preflight",
    "rebuild.yml": "rebuild",
    "rollback.yml": "rollback",
    "router.yml": "router",
    "runtime.yml": "nccl",
    "serve.yml": "server",
    "site.yml": "cuda",
    "update.yml": "update",
    "verify.yml": "verify",
    "vm.yml": "vm",
    "vm_destroy.yml": "vm",
}


def test_every_playbook_has_a_stage_tag_here():
    assert sorted(STAGE_TAG) == PLAYBOOKS


# Playbooks whose first play loads per-host settings the CLI hands them (the path of each host's
# proposal, gpuhost adopt --apply) before validate.yml, and the extra vars that name them.
LOADS_FIRST = {"adopt_apply.yml": "Load the proposal"}


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_every_playbook_validates_first(name):
    """validate.yml comes first, directly or through preflight.yml (update.yml)."""
    plays = _load(ROOT / "playbooks" / name)
    if name in LOADS_FIRST:
        # Its first play only loads each host's proposal (include_vars), so that validation
        # sees the settings the run will use; it changes nothing.
        assert [
            next(k for k in t if k.startswith("ansible.builtin.")) for t in plays[0]["tasks"]
        ] == ["ansible.builtin.include_vars"], name
        plays = plays[1:]
    first = plays[0].get("ansible.builtin.import_playbook")
    assert first in ("validate.yml", "preflight.yml"), name
    if first == "preflight.yml":
        assert _load(ROOT / "playbooks" / "preflight.yml")[0][
            "ansible.builtin.import_playbook"
        ] == ("validate.yml")


def test_validation_is_tagged_always():
    for task in _load(ROOT / "playbooks" / "validate.yml")[0]["tasks"]:
        assert task["tags"] == ["always"], task["name"]


def test_site_validates_once_and_tells_its_stages():
    """site.yml: validate.yml first, then every stage import says the run validated, so the
    stage's own validate.yml play matches no host (no task at all)."""
    imports = [
        p for p in _load(ROOT / "playbooks" / "site.yml") if "ansible.builtin.import_playbook" in p
    ]
    assert imports[0]["ansible.builtin.import_playbook"] == "validate.yml"
    assert "vars" not in imports[0]
    stages = [s for s in imports[1:] if s["ansible.builtin.import_playbook"] not in BUILDING_BLOCKS]
    assert len(stages) == len(imports) - 2  # the one host facts play besides validation
    for stage in stages:
        assert stage["vars"]["_gpuhost_site_validated"] is True, stage["name"]
    hosts = _load(ROOT / "playbooks" / "validate.yml")[0]["hosts"]
    assert "':!all' if _gpuhost_site_validated" in hosts


def test_validation_runs_once_per_run_and_again_in_the_next(tmp_path):
    """site.yml imports validate.yml through every stage: the first import validates, the later
    ones of the same run skip; the next run validates again (what says "validated" is a
    registered result of this run, never a cached fact)."""
    twice = ROOT / "playbooks" / f".test-validate-twice-{os.getpid()}.yml"
    twice.write_text(
        "- ansible.builtin.import_playbook: validate.yml\n"
        "- ansible.builtin.import_playbook: validate.yml\n"
    )
    try:
        for _ in range(2):
            proc = _run(str(twice), inventory=_inventory(tmp_path))
            out = proc.stdout + proc.stderr
            assert proc.returncode == 0, out
            results = re.findall(
                r"TASK \[Validate every gpuhost setting before any change\] \**\n.*\n(\w+): ", out
            )
            assert results == ["ok", "skipping"], out
    finally:
        twice.unlink()


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_every_role_entry_is_tagged(name):
    for play in _load(ROOT / "playbooks" / name):
        for entry in play.get("roles") or []:
            assert entry.get("tags"), f"{name}: role {entry['role']} has no tags"
        for section in ("pre_tasks", "tasks"):
            for task in play.get(section) or []:
                include = task.get("ansible.builtin.include_role")
                if include:
                    assert task.get("tags"), f"{name}: {task['name']} has no tags"
                    assert (include.get("apply") or {}).get("tags") == task["tags"], task["name"]


def _inventory(tmp_path):
    """localhost in both groups (router.yml runs on `routers`), local connection."""
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    inv = {
        "all": {
            "children": {
                "gpu_hosts": {"hosts": {"localhost": host}},
                "routers": {"hosts": {"localhost": host}},
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _run(playbook, *extra, inventory="inventory/local"):
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(ROOT / ".cache" / "test-facts"),
    }
    exe = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(exe), playbook, "-i", str(inventory), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_a_tag_selection_still_validates_first(name, tmp_path):
    """Each playbook run alone with one of its stage tags and a bad value stops in the
    validation task, before any change, naming the variable."""
    path = f"playbooks/{name}" if name != "site.yml" else "site.yml"
    extra = []
    if name in LOADS_FIRST:
        proposal = tmp_path / "proposal.yml"
        proposal.write_text("---\n{}\n")
        targets = {"localhost": {"file": str(proposal), "pid": 1}}
        extra = ["-e", json.dumps({"gpuhost_adopt_targets": targets})]
    proc = _run(
        path,
        "--tags",
        STAGE_TAG[name],
        "-e",
        "preflight_command_timeout=0",
        *extra,
        inventory=_inventory(tmp_path),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert re.search(r"^preflight_command_timeout: got '0'; allowed: ", out, re.M), out
    assert "nothing was changed" in out, out
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+).*failed=(\d+)", out)
    assert recap and recap.group(2) == "0" and recap.group(3) == "1", out
    tasks = re.findall(r"^TASK \[(.+?)\]", out, re.M)
    loads = [LOADS_FIRST[name]] if name in LOADS_FIRST else []
    assert tasks == [*loads, "Validate every gpuhost setting before any change"], out


def test_start_at_task_still_runs_the_roles_own_validation():
    """--start-at-task skips every task before the named one, validate.yml included
    (ansible-core's PlayIterator); a role after the start point still checks its own
    settings first (tasks/preflight.yml: gpuhost.gpu.validate limited to the role)."""
    proc = _run(
        "playbooks/verify.yml",
        "--start-at-task",
        "Resolve the serving profile",
        "-e",
        "verify_max_tokens=0",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Validate every gpuhost setting before any change" not in out, out
    assert "TASK [verify : Validate the verify settings]" in out, out
    assert re.search(r"^verify_max_tokens: got '0'; allowed: ", out, re.M), out
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0 .*failed=1", out), out


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sglang_server_served_model_name", "glm-5\nExecStartPre=+/bin/sh -c id"),
        ("sglang_server_flags", {"--chat-template": "x\ny"}),
        ("sglang_server_extra_env", {"A": "1\nLD_PRELOAD=/tmp/x.so"}),
        ("sglang_router_extra_args", {"--log-level": "info\r"}),
        ("sglang_server_firewall_cidrs", ["10.0.0.0/8\n"]),
        ("nccl_env_overrides", {"NCCL_DEBUG": "INFO\nNCCL_P2P_DISABLE=1"}),
    ],
)
def test_control_characters_are_refused_naming_the_variable(name, value):
    errors = errors_for({name: value})
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{name}: got "), errors
    assert "allowed: text without control characters" in errors[0]


def test_every_rendered_setting_is_checked_for_control_characters():
    """Each role variable a unit, env file, firewall rule or launcher template reads."""
    rendered = set()
    roles = ("sglang_server", "sglang_router", "nccl", "metrics")
    for role in roles:
        for path in (ROOT / "roles" / role / "templates").glob("*.j2"):
            rendered |= set(re.findall(rf"\b((?:{'|'.join(roles)})_[a-z_]+)", path.read_text()))
    numbers = {
        n
        for n, s in ((n, s) for o in SPECS.values() for n, s in o.items())
        if s.get("type") in ("int", "float", "bool") or s.get("choices")
    }
    for name in sorted(rendered - numbers):
        if name not in CONSTRAINTS["variables"] and not any(name in o for o in SPECS.values()):
            continue  # a Jinja name that is no setting
        assert (CONSTRAINTS["variables"].get(name) or {}).get("no_control"), name


def test_plain_text_secret_warns_naming_the_variable():
    raw = {"a_token": "hf_abcdef", "b_key": "{{ lookup('ansible.builtin.env', 'B') }}", "c_key": ""}
    warnings = plain_text_secrets(raw, vaulted=lambda value: False)
    assert len(warnings) == 1 and warnings[0].startswith("a_token: set as plain text"), warnings
    assert "hf_abcdef" not in warnings[0]
    assert plain_text_secrets(raw, vaulted=lambda value: True) == []
    assert set(secret_names(SPECS)) >= {"model_cache_hf_token", "sglang_server_api_key"}


def test_vault_and_plain_secrets_through_ansible(tmp_path):
    """The real thing: a Vault-encrypted key passes quietly, a plain-text token warns."""
    password = tmp_path / "vault-pass"
    password.write_text("test-only-password\n")
    exe = Path(sys.executable).with_name("ansible-vault")
    encrypted = subprocess.run(
        [
            str(exe),
            "encrypt_string",
            "--vault-password-file",
            str(password),
            "--name",
            "sglang_server_api_key",
            "k" * 24,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    extra = tmp_path / "secrets.yml"
    extra.write_text(encrypted + "\nmodel_cache_hf_token: hf_plain_text_value\n")
    proc = _run("playbooks/validate.yml", "-e", f"@{extra}", "--vault-password-file", str(password))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "model_cache_hf_token: set as plain text" in out, out
    assert "sglang_server_api_key: set as plain text" not in out, out
    assert "hf_plain_text_value" not in out and "k" * 24 not in out


def test_tp_against_the_gpu_count_is_one_rule_naming_the_variable():
    for name in ("sglang_server_tp_size", "preflight_tp_size"):
        errors = errors_for({name: 3, "preflight_expected_gpu_count": 8})
        assert errors == [
            f"{name}: got 3; allowed: a divisor of preflight_expected_gpu_count (8): 1, 2, 4, 8"
            " - tensor parallelism splits every layer evenly over the GPUs"
            " (roles/preflight/meta/constraints.yml rule tp_fits_gpu_count)"
        ]
    both = {"sglang_server_tp_size": 16, "preflight_tp_size": 16, "preflight_expected_gpu_count": 8}
    assert len(errors_for(both)) == 1
    assert [r["name"] for r in CONSTRAINTS["rules"] if "tp" in r["name"]] == ["tp_fits_gpu_count"]


def test_preflight_check_of_the_gpus_found_says_the_same():
    from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_tp import tp_misfit

    message = tp_misfit("sglang_server_tp_size", 3, 8, "the GPUs found")
    assert message == (
        "sglang_server_tp_size: got 3; allowed: a divisor of the GPUs found (8): 1, 2, 4, 8"
        " - tensor parallelism splits every layer evenly over the GPUs"
    )
    assert tp_misfit("x", 4, 8, "n") is None and tp_misfit("x", 0, 8, "n") is None


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"model_cache_model_id": "not a repo"}, "model_cache_model_id"),
        ({"model_cache_revision": "main branch"}, "model_cache_revision"),
        ({"model_cache_expected_size_gib": -1}, "model_cache_expected_size_gib"),
        ({"model_cache_max_workers": 0}, "model_cache_max_workers"),
        ({"model_cache_hf_home": "cache"}, "model_cache_hf_home"),
        ({"model_cache_mode": "prestaged"}, "model_cache_prestaged_path"),
        # raw-typed, given as an int: the pattern still applies
        ({"rolling_update_serial": 0}, "rolling_update_serial"),
        # parsed as addresses and networks, not matched
        ({"sglang_server_host": "10.0.0.300"}, "sglang_server_host"),
        ({"sglang_router_host": "0.0.0.0.0"}, "sglang_router_host"),
        ({"sglang_server_firewall_cidrs": ["10.0.0.0/33"]}, "sglang_server_firewall_cidrs"),
        # a CUDA release, or a driver branch, older than the Python lane needs
        ({"python_env_lane": "cu13"}, "cuda_toolkit_version"),
        (
            {
                "python_env_lane": "cu13",
                "cuda_toolkit_version": "13.0",
                "nvidia_driver_branch": 570,
            },
            "nvidia_driver_branch",
        ),
    ],
)
def test_gaps_closed(values, name):
    errors = validate(SPECS, CONSTRAINTS, values, defaults=plain_defaults(SPECS))[0]
    errors = [e for e in errors if "not set; allowed: required" not in e]
    assert len(errors) == 1 and errors[0].startswith(f"{name}: got "), errors


@pytest.mark.parametrize(
    "values",
    [
        {"model_cache_model_id": "lukealonso/GLM-5-NVFP4", "model_cache_revision": "a" * 40},
        {"rolling_update_serial": 2},
        {"rolling_update_serial": "25%"},
        {"sglang_server_host": "::", "sglang_server_api_key": "k" * 20},
        {"sglang_server_firewall_cidrs": ["10.0.0.0/8", "fd00::/8", "192.168.1.7"]},
        {"python_env_lane": "cu13", "cuda_toolkit_version": "13.0", "nvidia_driver_branch": 580},
        {"model_cache_mode": "prestaged", "model_cache_prestaged_path": "/srv/models/glm"},
    ],
)
def test_gaps_closed_good_values_pass(values):
    errors = validate(SPECS, CONSTRAINTS, values, defaults=plain_defaults(SPECS))[0]
    assert [e for e in errors if "not set; allowed: required" not in e] == []


def test_a_role_output_cached_by_an_earlier_run_is_no_typo(tmp_path):
    """verify's verify_server_installed is cached as a fact; the next run's validation sees it
    among the variables and must not call it an undeclared setting, while a real typo in the
    inventory still gets its warning."""
    earlier = tmp_path / "earlier.yml"
    earlier.write_text(
        "- hosts: gpu_hosts\n  gather_facts: false\n  tasks:\n"
        "    - name: What role verify leaves in the fact cache\n"
        "      ansible.builtin.set_fact: {verify_server_installed: true, cacheable: true}\n"
    )
    inventory = _inventory(tmp_path)
    outs = []
    for playbook, extra in (
        (earlier, []),
        ("playbooks/validate.yml", ["-e", "preflight_expected_gpu_cont=8"]),
    ):
        proc = run_playbook([playbook, "-i", inventory, *extra], tmp_path / "facts")
        outs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, outs[-1]
    assert "preflight_expected_gpu_cont: not declared" in outs[-1], outs[-1]
    assert "verify_server_installed: not declared" not in outs[-1], outs[-1]
