"""The port rules fail closed (issue 15 items 10 and 19), read from the rendered templates.

The server's and the router's nftables rules, the units that load them and the units that bind
to them are rendered with Jinja and the project's filters, the way Ansible renders them, and the
rule sets are checked for what each must contain. The live behaviour (stopping the rule's unit,
rollback of the rule) is tested in molecule/sglang_server/tests/test_firewall_fail_closed.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_router_args import (
    implementation as router_impl,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_validate import (
    load_role_constraints,
    load_role_specs,
    validate,
)
from gpuhost_fakes import ROOT, template_env

SERVER = ROOT / "roles" / "sglang_server"
ROUTER = ROOT / "roles" / "sglang_router"


def _env():
    return template_env()


def _var(role: Path, name: str, values: dict):
    """One variable of the role's vars/main.yml, rendered over `values` (as Ansible does)."""
    text = yaml.safe_load((role / "vars" / "main.yml").read_text())[name]
    out = _env().from_string(text).render(values).strip()
    return yaml.safe_load(out) if out[:1] in "[{" else out


def _server_values(**overrides):
    values = {
        "ansible_managed": "managed",
        "sglang_server_service_name": "sglang-server",
        "sglang_server_port": 30000,
        "sglang_server_host": "0.0.0.0",
        "sglang_server_firewall_cidrs": [],
        "sglang_server_metrics_cidrs": [],
        "sglang_server_enable_metrics": False,
        "gpuhost_config_dir": "/etc/gpuhost",
        "gpuhost_sglang": {"argv": ["python", "-m", "sglang.launch_server", "--port", "30000"]},
        **overrides,
    }
    values["_sglang_server_firewall_sources"] = list(
        dict.fromkeys(values["sglang_server_firewall_cidrs"])
    )
    values["_sglang_server_firewall_ports"] = _var(SERVER, "_sglang_server_firewall_ports", values)
    return values


def _render(role: Path, template: str, values: dict) -> str:
    return _env().from_string((role / "templates" / template).read_text()).render(values)


# ---------------------------------------------------------------- the server's rule


def test_an_empty_cidr_list_renders_a_loopback_only_drop_rule():
    rule = _render(SERVER, "sglang-firewall.nft.j2", _server_values())
    assert 'iif "lo" accept' in rule
    assert "saddr" not in rule  # no network but loopback is let in
    assert re.search(r"tcp dport @server_ports counter drop", rule), rule


def test_the_rule_covers_the_api_port_and_the_torch_store_stretch():
    rule = _render(
        SERVER,
        "sglang-firewall.nft.j2",
        _server_values(sglang_server_firewall_cidrs=["10.0.0.0/8", "fd00::/8"]),
    )
    elements = re.search(r"elements = \{ (.*) \}", rule).group(1)
    # SGLang draws its torch.distributed (nccl) port from port + 100..1000 when not given.
    assert elements == "30000, 30100-31000", rule
    assert "tcp dport @server_ports ip saddr { 10.0.0.0/8 } accept" in rule
    assert "tcp dport @server_ports ip6 saddr { fd00::/8 } accept" in rule


def test_the_profiles_nccl_port_and_dist_init_port_are_covered():
    argv = ["python", "--port", "30000", "--nccl-port", "40000", "--dist-init-addr=10.1.1.1:41000"]
    values = _server_values(gpuhost_sglang={"argv": argv})
    assert values["_sglang_server_firewall_ports"] == ["30000", "30100-31000", "40000", "41000"]
    # A port inside the covered stretch is not listed twice (overlapping nft intervals fail).
    argv = ["python", "--nccl-port", "30500", "--dist-init-addr", "[::1]:30000"]
    values = _server_values(gpuhost_sglang={"argv": argv})
    assert values["_sglang_server_firewall_ports"] == ["30000", "30100-31000"]


def test_the_rule_unit_keeps_the_table_when_stopped_and_reloads_in_place():
    unit = _render(SERVER, "sglang-firewall.service.j2", _server_values())
    assert not re.search(r"^ExecStop", unit, re.M)  # stopping it leaves the table: fail closed
    assert "ExecReload=/usr/sbin/nft -f /etc/gpuhost/sglang-server-firewall.nft" in unit


def test_the_server_unit_binds_to_the_rule():
    text = (SERVER / "templates" / "sglang-server.service.j2").read_text()
    unit_section = text.split("[Service]")[0]
    assert "BindsTo={{ sglang_server_service_name }}-firewall.service" in unit_section
    assert "After={{ sglang_server_service_name }}-firewall.service" in unit_section
    # Every server, whatever its listen address: a real server on a loopback API still opens
    # torch's store on every address, and no setting turns the rule off.
    assert "{% if" not in unit_section.split("BindsTo=")[0].split("Requires=")[1]
    assert "_sglang_server_firewall:" not in (SERVER / "vars" / "main.yml").read_text()


def test_the_rule_is_kept_and_restored_with_the_known_good_config():
    tasks = SERVER / "tasks"
    assert "_sglang_server_kept_entries" in (tasks / "run.yml").read_text()
    kept = yaml.safe_load((SERVER / "vars" / "main.yml").read_text())["_sglang_server_kept_entries"]
    assert "_sglang_server_firewall_files['firewall.nft']" in kept
    assert "_sglang_server_firewall_files['firewall.service']" in kept
    assert "_sglang_server_firewall_files" in (tasks / "restore_files.yml").read_text()
    files = yaml.safe_load((SERVER / "vars" / "main.yml").read_text())[
        "_sglang_server_firewall_files"
    ]
    assert set(files) == {"firewall.nft", "firewall.service"}


# ---------------------------------------------------------------- the router


def _router_values(**overrides):
    values = {
        "ansible_managed": "managed",
        "_sglang_router_impl": router_impl("smg"),
        "_sglang_router_worker_urls": ["http://10.0.0.1:30000"],
        "gpuhost_service_user": "gpuhost",
        "gpuhost_service_group": "gpuhost",
        "gpuhost_config_dir": "/etc/gpuhost",
        "sglang_router_service_name": "sglang-router",
        "sglang_router_venv": "/opt/gpuhost/router-venv",
        "sglang_router_host": "0.0.0.0",
        "sglang_router_port": 30000,
        "sglang_router_policy": "cache_aware",
        "sglang_router_prometheus_host": "127.0.0.1",
        "sglang_router_prometheus_port": 29000,
        "sglang_router_extra_args": {},
        "sglang_router_timeout_stop_sec": 300,
        "sglang_router_firewall_cidrs": [],
        "_sglang_router_keys_path": "/etc/gpuhost/sglang-router.keys",
        **overrides,
    }
    values["_sglang_router_loopback"] = _var(ROUTER, "_sglang_router_loopback", values) == "True"
    values["_sglang_router_firewall"] = _var(ROUTER, "_sglang_router_firewall", values) == "True"
    values["_sglang_router_firewall_nft"] = _var(ROUTER, "_sglang_router_firewall_nft", values)
    return values


def test_router_unit_carries_the_server_units_hardening():
    router = _render(ROUTER, "sglang-router.service.j2", _router_values())
    server = (SERVER / "templates" / "sglang-server.service.j2").read_text()
    hardening = server.split("# --- Hardening")[1].split("[Install]")[0]
    wanted = {
        line.split("=", 1)[0]
        for line in hardening.splitlines()
        if "=" in line and not line.startswith("#")
    } - {"ReadWritePaths", "DeviceAllow"}  # the router writes nothing and needs no GPU
    present = {line.split("=", 1)[0] for line in router.splitlines() if "=" in line}
    assert wanted <= present, wanted - present
    assert "PrivateDevices=yes" in router and "DeviceAllow" not in router


def test_router_beyond_loopback_gets_a_loopback_only_rule_and_binds_to_it():
    values = _router_values()
    rule = _render(ROUTER, "sglang-router-firewall.nft.j2", values)
    assert "elements = { 30000, 29000 }" in rule
    assert "saddr" not in rule and "tcp dport @router_ports counter drop" in rule
    unit = _render(ROUTER, "sglang-router.service.j2", values)
    assert "BindsTo=sglang-router-firewall.service" in unit
    loader = _render(ROUTER, "sglang-router-firewall.service.j2", values)
    assert not re.search(r"^ExecStop", loader, re.M) and "ExecReload=/usr/sbin/nft -f" in loader
    values = _router_values(sglang_router_firewall_cidrs=["192.168.0.0/16"])
    rule = _render(ROUTER, "sglang-router-firewall.nft.j2", values)
    assert "tcp dport @router_ports ip saddr { 192.168.0.0/16 } accept" in rule


def test_router_on_loopback_has_no_rule():
    values = _router_values(sglang_router_host="127.0.0.1")
    assert values["_sglang_router_firewall"] is False
    assert "BindsTo" not in _render(ROUTER, "sglang-router.service.j2", values)


def _load(path):
    return yaml.safe_load(Path(path).read_text())


def test_router_beyond_loopback_needs_the_client_key():
    specs = load_role_specs(str(ROOT / "roles"), _load)
    constraints = load_role_constraints(str(ROOT / "roles"), _load)
    values = {
        "sglang_router_host": "0.0.0.0",
        "sglang_router_admin_api_key": "a" * 20,
        "sglang_router_worker_api_key": "",
    }
    errors = [
        e for e in validate(specs, constraints, values)[0] if "not set; allowed: required" not in e
    ]
    assert len(errors) == 1 and errors[0].startswith("sglang_router_worker_api_key: got ''"), errors
    assert "open_router_needs_client_key" in errors[0]
    values["sglang_router_worker_api_key"] = "c" * 20
    errors = [
        e for e in validate(specs, constraints, values)[0] if "not set; allowed: required" not in e
    ]
    assert errors == []
    values = {"sglang_router_firewall_cidrs": ["10.0.0.0/33"]}
    errors = [
        e for e in validate(specs, constraints, values)[0] if "not set; allowed: required" not in e
    ]
    assert len(errors) == 1 and errors[0].startswith("sglang_router_firewall_cidrs"), errors
