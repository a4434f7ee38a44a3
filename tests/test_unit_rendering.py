"""What reaches a unit file: free text and the router's command line are quoted for
systemd, control characters are refused (issue 15 item 4). The router unit template is
rendered with Jinja and the project's own filters, the way Ansible renders it."""

from __future__ import annotations

import shlex

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_render import (
    control_characters,
    unit_text,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_router_args import (
    implementation,
)
from gpuhost_fakes import ROOT, template_env


def test_control_characters_found_in_nested_values():
    assert control_characters({"a": ["ok", "x\ny"], "k\t": 1}) == ["'\\n'", "'\\t'"]
    assert control_characters({"--flag": "value with spaces", "n": 3}) == []
    assert control_characters("line\u2028separator") == ["'\\u2028'"]


def test_unit_text_escapes_specifiers_and_refuses_newlines():
    assert unit_text("100% of glm-5") == "100%% of glm-5"
    with pytest.raises(ValueError, match="control character"):
        unit_text("glm-5\nExecStartPre=+/bin/sh -c id")


def _render_router(**overrides):
    env = template_env()
    path = ROOT / "roles" / "sglang_router" / "templates" / "sglang-router.service.j2"
    values = {
        "ansible_managed": "managed",
        "_sglang_router_impl": implementation("smg"),
        "_sglang_router_worker_urls": ["http://10.0.0.1:30000"],
        "gpuhost_service_user": "sglang",
        "gpuhost_service_group": "sglang",
        "gpuhost_config_dir": "/etc/gpuhost",
        "sglang_router_service_name": "sglang-router",
        "sglang_router_venv": "/opt/gpuhost/router-venv",
        "sglang_router_host": "127.0.0.1",
        "sglang_router_port": 30000,
        "sglang_router_policy": "cache_aware",
        "sglang_router_prometheus_host": "127.0.0.1",
        "sglang_router_prometheus_port": 29000,
        "sglang_router_extra_args": {},
        "sglang_router_timeout_stop_sec": 300,
        "_sglang_router_firewall": False,
        "_sglang_router_keys_path": "/etc/gpuhost/sglang-router.keys",
        **overrides,
    }
    return env.from_string(path.read_text()).render(values)


def _exec_start(unit):
    lines = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return lines[0][len("ExecStart=") :]


def test_router_exec_start_quotes_each_argument():
    unit = _render_router(
        sglang_router_extra_args={
            "--log-level": "info; rm -rf /",
            "--switch": True,
            "--off": False,
            "--none": None,
            "--pct": "50%",
        }
    )
    line = _exec_start(unit)
    assert line.endswith(" --worker-urls $SGLANG_ROUTER_WORKER_URLS"), line
    # systemd's quoting reads back like the shell's for these: one argument each.
    argv = shlex.split(line.replace("%%", "%").rsplit(" --worker-urls", 1)[0])
    assert argv[:2] == [
        "/opt/gpuhost/router-venv/bin/python",
        "/opt/gpuhost/router-venv/bin/gpuhost-router-launch",
    ]
    assert argv[argv.index("--log-level") + 1] == "info; rm -rf /"
    assert "--switch" in argv and "--off" not in argv and "--none" not in argv
    assert '"50%%"' in line or "50%%" in line
    assert "Description=smg 1.13.0 (gpuhost): fronts 1 SGLang worker(s)" in unit


def test_router_unit_refuses_a_newline_in_its_description():
    with pytest.raises(ValueError, match="control character"):
        _render_router(_sglang_router_impl=implementation("smg", "1.13.0\nExecStartPre=+/bin/sh"))
