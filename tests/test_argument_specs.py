"""Every role's meta/argument_specs.yml must match its defaults: each default is declared
with the same value, and nothing is declared with a default the role does not ship. A role's
defaults are its defaults/main.yml plus its shared settings, which live only in
group_vars/all/<role>.yml (tests/test_shared_settings.py). This keeps the documented surface
and the real behaviour from drifting apart."""

from pathlib import Path

import pytest
import yaml

ROLES = sorted(
    p.parent.parent
    for p in Path(__file__).resolve().parents[1].glob("roles/*/meta/argument_specs.yml")
)


def _load(path: Path):
    return yaml.safe_load(path.read_text()) or {}


def _defaults(role: Path) -> dict:
    """defaults/main.yml and the role's shared settings in group_vars/all/<role>.yml."""
    defaults_file = role / "defaults" / "main.yml"
    defaults = _load(defaults_file) if defaults_file.exists() else {}
    shared_file = role.parents[1] / "group_vars" / "all" / f"{role.name}.yml"
    shared = _load(shared_file) if shared_file.exists() else {}
    return {**defaults, **shared}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_specs_equal_defaults(role: Path):
    defaults = _defaults(role)
    options = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"].get(
        "options", {}
    )

    missing = sorted(set(defaults) - set(options))
    assert not missing, f"{role.name}: defaults not declared in argument_specs: {missing}"

    for name, spec in options.items():
        if name in defaults:
            assert "default" in spec, f"{role.name}: {name} has a default but its spec has none"
            assert spec["default"] == defaults[name], (
                f"{role.name}: {name} default differs: spec {spec['default']!r} "
                f"vs defaults/main.yml or group_vars/all/{role.name}.yml {defaults[name]!r}"
            )
        else:
            assert "default" not in spec, (
                f"{role.name}: {name} declares a default that its defaults lack"
            )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_vars_are_role_prefixed(role: Path):
    defaults = _defaults(role)
    bad = [k for k in defaults if not k.startswith(f"{role.name}_")]
    assert not bad, f"{role.name}: defaults without the role prefix: {bad}"


def test_there_are_roles_to_check():
    assert any(r.name == "base" for r in ROLES)
