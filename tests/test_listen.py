"""The listen rules once (issue 29): module_utils/gpuhost_listen.py is the one home of the
loopback addresses, the API-key pattern and the server's default port; the roles use its
filters, the constraints its `unless_loopback`, the Python its names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_listen as listen
from gpuhost_fakes import ROOT, run_debug_play
from test_validate import errors_for

HOME = ROOT / "plugins" / "module_utils" / "gpuhost_listen.py"
DOC_BLOCKS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def _product(*suffixes):
    for base in ("plugins", "roles", "playbooks", "src", "group_vars"):
        for path in sorted((ROOT / base).rglob("*")):
            skipped = "molecule" in path.parts or "__pycache__" in path.parts
            if path.is_file() and path.suffix in suffixes and path != HOME and not skipped:
                yield path


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), (" 127.0.0.1 ", True),
     ("0.0.0.0", False), ("::", False), ("127.0.0.2", False), ("gpu-host-1", False)],
)  # fmt: skip
def test_loopback(host, loopback):
    assert listen.is_loopback(host) is loopback


def test_api_key():
    assert listen.api_key_valid("A-z0._~+/=" + "x" * 6)
    for bad in ("short-key", "has a space in it ok", 'quote"inside-0123456', "", None):
        assert not listen.api_key_valid(bad), bad


def test_no_other_file_lists_the_loopback_addresses():
    found = [
        str(p.relative_to(ROOT))
        for p in _product(".py", ".yml", ".j2")
        if re.search(r"""['"]::1['"]""", p.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_no_other_file_writes_the_key_pattern():
    found = [
        str(p.relative_to(ROOT))
        for p in _product(".py", ".yml", ".j2")
        if "A-Za-z0-9._~+/=-" in p.read_text(encoding="utf-8")
    ]
    assert not found, found


def _port_literals(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in DOC_BLOCKS for t in node.targets)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and id(node) not in docs
        and (
            node.value == listen.SERVER_PORT
            or (isinstance(node.value, str) and ":30000" in node.value)
        )
    ]


def test_no_other_python_spells_the_default_port():
    found = {str(p.relative_to(ROOT)): _port_literals(p) for p in _product(".py")}
    assert not {k: v for k, v in found.items() if v}


def test_the_port_reader_finds_a_planted_literal(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('DOCUMENTATION = "default: 30000"\nPORT = 30000\nURL = "http://h:30000"\n')
    assert _port_literals(planted) == [2, 3]


def test_unless_loopback_in_the_constraints():
    for host in listen.LOOPBACK_HOSTS:
        assert errors_for({"sglang_server_host": host, "sglang_server_api_key": ""}) == []
        assert errors_for({"sglang_router_host": host, "sglang_router_admin_api_key": ""}) == []
    (error,) = errors_for({"sglang_server_host": "10.0.0.5", "sglang_server_api_key": ""})
    assert error.startswith("sglang_server_api_key: got ''")


def test_the_filters_through_ansible(tmp_path):
    rc, log = run_debug_play(
        tmp_path,
        "LOOP={{ ['::1', '0.0.0.0'] | map('gpuhost.gpu.is_loopback') | list }} "
        "KEY={{ ('k' * 16) | gpuhost.gpu.api_key_valid }},{{ 'k k' | gpuhost.gpu.api_key_valid }}",
    )
    assert rc == 0, log
    assert "LOOP=[True, False] KEY=True,False" in log, log
