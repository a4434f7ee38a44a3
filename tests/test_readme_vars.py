"""docs/variables.md documents every user-facing variable: its tables are generated from the
roles' argument specs (tools/readme_vars.py) and must be current."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIABLES = ROOT / "docs" / "variables.md"


def test_variable_tables_are_current():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "readme_vars.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_role_variable_is_in_docs_variables():
    import yaml

    text = VARIABLES.read_text()
    for specs in ROOT.glob("roles/*/meta/argument_specs.yml"):
        options = yaml.safe_load(specs.read_text())["argument_specs"]["main"].get("options") or {}
        for name in options:
            assert f"`{name}`" in text, (
                f"{name} ({specs.parent.parent.name}) missing from docs/variables.md"
            )
