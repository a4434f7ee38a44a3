"""One finding shape (issue 29): module_utils/gpuhost_finding.py makes every finding the
collection reports, in Python and (filter gpuhost.gpu.finding) in the roles' Jinja."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import (
    finding,
    merge_findings,
    prefixed,
)
from gpuhost_fakes import run_debug_play

ROOT = Path(__file__).resolve().parents[1]


def test_the_shape_and_the_statuses():
    assert finding("a.b", "warn", "m", "f") == {
        "check": "a.b",
        "status": "warn",
        "message": "m",
        "fix": "f",
    }
    assert finding("a.b", "pass", "m")["fix"] == ""
    assert prefixed("doctor.")("gpu", "fail", "m")["check"] == "doctor.gpu"
    with pytest.raises(ValueError, match="'skipped' is not one of"):
        finding("a.b", "skipped", "m")


def test_merge_replaces_one_family_only():
    old = [finding("a.x", "fail", "old"), finding("b.y", "pass", "kept")]
    new = [finding("a.z", "pass", "new")]
    assert merge_findings(old, new, "a.") == [old[1], new[0]]
    assert merge_findings(None, new, "a.") == new


def _product_files(suffixes):
    for base in ("plugins", "roles", "playbooks", "src"):
        for path in (ROOT / base).rglob("*"):
            if path.suffix in suffixes and "molecule" not in path.parts and path.is_file():
                yield path


def test_no_finding_is_built_by_hand():
    """A finding dict written out ("fix": ... in Python, 'check': ... in a role's Jinja) is a
    second home for the shape: use finding() / the filter."""
    here = ROOT / "plugins" / "module_utils" / "gpuhost_finding.py"
    by_hand = sorted(
        str(p.relative_to(ROOT))
        for p in _product_files({".py", ".yml", ".j2"})
        if p != here and re.search(r"""["']fix["']\s*:""", p.read_text(encoding="utf-8"))
    )
    assert not by_hand, by_hand


def test_the_filter_through_ansible(tmp_path):
    rc, log = run_debug_play(
        tmp_path,
        "{{ 'x.y' | gpuhost.gpu.finding('warn', 'said', 'do') | to_json }}",
        "{{ 'x.y' | gpuhost.gpu.finding('maybe', 'said') }}",
    )
    assert '"check": "x.y", "status": "warn", "message": "said", "fix": "do"' in log, log
    assert rc == 2 and "'maybe' is not one of" in log, log
