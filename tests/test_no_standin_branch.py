"""One product path (issue 29 item 1): no role, template, playbook, plugin or CLI module
branches on a test double of SGLang.

The SGLang stand-in enters where SGLang does (tests/standin/sglang_pkg, installed into the
server's venv by the tests), so the product never needs to know about it. What may remain:

- code that reads what a server or a tool says of itself (the `standin` key of the server's
  /server_info, the STAND-IN line of an nvidia-smi double's output) - data, not settings;
- comments and documentation.

This fails when a role, template or playbook names a stand-in outside a comment, or when a
plugin or CLI module takes a stand-in setting again (a variable, an argument, a flag, a
policy), or reads `standin` from the resolved profile instead of from the server.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Known and justified: python_env's smoke test stands in for the SGLang stack's imports where a
# test lock (tests/standin/locks, a few PyPI packages) has no SGLang, torch or FlashInfer
# (molecule python_env and rolling_update). Removing it needs a stand-in for those in a
# local package index; see the role's README.
ALLOWED = {"roles/python_env"}

WORD = re.compile(r"stand[-_ ]?in", re.IGNORECASE)
# A setting or argument that names a double: sglang_server_standin_script,
# _sglang_server_standin, python_env_standin_smoke, --standin, args.get("standin"),
# policy.get("standin"), gpuhost_sglang.standin, ... The server's answer is read from
# `server` / `server_info` / the parsed samples, which these leave alone.
SETTING = re.compile(
    r"[a-z]\w*_standin\w*"  # a prefixed variable: role_standin..., _sglang_server_standin
    r"|\bstandin_\w+"  # standin_script, standin_path
    r"|--standin\b"
    r"|\b(?:args|policy|params|gpuhost_sglang|sglang)\b[^\n]{0,20}\bstandin\b"
)
# Names that only read data (the samples' `standin` mark, the server's answer).
READERS = {"is_standin"}


def _product_files(*tops: str, suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for top in tops:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if (
                path.is_file()
                and path.suffix in suffixes
                and not rel.endswith("README.md")
                and not any(rel.startswith(a + "/") for a in ALLOWED)
            ):
                out.append(path)
    return out


def _code(line: str, suffix: str) -> str:
    """The part of a line that is not a comment."""
    if suffix in (".yml", ".yaml", ".j2", ""):
        stripped = line.lstrip()
        if stripped.startswith("#") or stripped.startswith("{#"):
            return ""
        return re.split(r"\s#\s", line, maxsplit=1)[0]
    if suffix == ".py":
        stripped = line.lstrip()
        return "" if stripped.startswith("#") else line.split("  #", 1)[0]
    return line


def _roles_and_playbooks() -> list[Path]:
    files = _product_files("roles", "playbooks", suffixes=(".yml", ".yaml", ".j2", ".sh", ""))
    return [*files, ROOT / "site.yml"] if (ROOT / "site.yml").is_file() else files


# meta/argument_specs.yml and meta/constraints.yml: their descriptions are documentation, a
# key is a variable.
META_KEY = re.compile(r"^\s*\w*stand_?in\w*\s*:", re.IGNORECASE)


def test_no_role_template_or_playbook_names_a_stand_in():
    found = []
    for path in _roles_and_playbooks():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        meta = path.parent.name == "meta"
        for number, line in enumerate(text.splitlines(), 1):
            code = _code(line, path.suffix)
            if META_KEY.search(code) if meta else WORD.search(code):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "a test double is named in the product path:\n" + "\n".join(found)


def test_no_plugin_or_cli_module_takes_a_stand_in_setting():
    found = []
    for path in _product_files("plugins", "src/gpuhost", suffixes=(".py",)):
        in_docstring = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            # Module and function docstrings are documentation: skip them.
            if line.count('"""') == 1:
                in_docstring = not in_docstring
                continue
            if in_docstring:
                continue
            code = _code(line, ".py")
            for match in SETTING.finditer(code):
                if match.group(0) not in READERS:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "a stand-in setting in plugin or CLI code:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ('_sglang_server_entrypoint: "{{ x if _sglang_server_standin else y }}"', True),
        ("ExecStart={{ script }} --standin", True),
        ("  when: not sglang_server_standin_script", True),
        ('            "standin": bool(args.get("standin")),', True),
        ('        if policy.get("standin"):', True),
        ('    standin = (run.facts["gpuhost_sglang"] or {}).get("standin")', True),
        ('    if server.get("standin"):', False),
        ('    return any(gpu.get("standin") for _, gpu in levels(lines))', False),
        ("def is_standin(lines):", False),
    ],
)
def test_the_patterns_catch_settings_and_leave_data_alone(line, caught):
    hits = [m.group(0) for m in SETTING.finditer(line) if m.group(0) not in READERS]
    yaml_hit = WORD.search(_code(line, ".yml")) is not None
    if line.lstrip().startswith(("_sglang", "ExecStart", "when")):
        assert yaml_hit is caught
    else:
        assert bool(hits) is caught, hits
