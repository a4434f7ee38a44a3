"""sha256sum output, read in one place (issue 29): plugin_utils/gpuhost_sums.py, used by
role rolling_update (config_hashes)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_sums as sums

ROOT = Path(__file__).resolve().parents[1]


def test_real_sha256sum_output_with_a_missing_file(tmp_path):
    unit, env = tmp_path / "unit", tmp_path / "env"
    unit.write_text("[Service]\n")
    env.write_text("A=1\n")
    out = subprocess.run(
        ["sha256sum", unit, env, tmp_path / "kg" / "unit"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 1  # the missing file: role rolling_update accepts rc 1
    parsed = sums.parse(out.stdout)
    assert parsed == {
        str(unit): hashlib.sha256(b"[Service]\n").hexdigest(),
        str(env): hashlib.sha256(b"A=1\n").hexdigest(),
    }
    named = sums.config_hashes(
        out.stdout, {"live": [str(unit), str(env)], "known_good": [str(tmp_path / "kg" / "unit")]}
    )
    both = ":".join(parsed[str(p)] for p in (unit, env))
    assert named == {"live": hashlib.sha256(both.encode()).hexdigest()[:12], "known_good": ""}


def test_no_role_parses_sha256sum_in_jinja():
    found = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "roles").rglob("*.yml"))
        if "split('  '" in p.read_text(encoding="utf-8")
    ]
    assert not found, found
