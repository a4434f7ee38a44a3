"""The CLI reads the collection's code and ansible-runner's job events one way each
(issue 29): gpuhost.plugin_code loads plugins/module_utils and plugins/plugin_utils,
gpuhost.runfacts.job_events reads job_events/."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuhost import plugin_code, runfacts

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuhost"


def _sources():
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_one_loader_for_plugin_code():
    found = [
        str(p.relative_to(SRC))
        for p in _sources()
        if p.name != "plugin_code.py"
        and re.search(
            r"spec_from_file_location|ansible_collections\.gpuhost|\"(module|plugin)_utils\"",
            p.read_text(),
        )
    ]
    assert not found, found


def test_the_loader_gives_the_collection_code_and_a_projects_own(tmp_path):
    secrets = plugin_code.module_utils("gpuhost_secrets")
    assert secrets.is_secret_name("HF_TOKEN")
    assert callable(plugin_code.plugin_utils("gpuhost_models_lock").read_lock)
    for folder in ("module_utils", "plugin_utils"):
        own = tmp_path / "plugins" / folder
        own.mkdir(parents=True)
        (own / "gpuhost_own.py").write_text(f"WHO = 'the project, {folder}'\n")
    assert plugin_code.module_utils("gpuhost_own", tmp_path).WHO == "the project, module_utils"
    assert plugin_code.plugin_utils("gpuhost_own", tmp_path).WHO == "the project, plugin_utils"


def test_one_reader_of_job_events(tmp_path):
    found = [
        str(p.relative_to(SRC))
        for p in _sources()
        if p.name != "runfacts.py" and 'glob("*/job_events' in p.read_text()
    ]
    assert not found, found
    events = tmp_path / "ident" / "job_events"
    events.mkdir(parents=True)
    for counter in (10, 2, 1):
        (events / f"{counter}-uuid.json").write_text(json.dumps({"counter": counter}))
    (events / "3-broken.json").write_text("{not json")
    assert [e["counter"] for e in runfacts.job_events(tmp_path)] == [1, 2, 10]


def test_only_the_cli_imports_the_commands():
    """The layers point one way: cli -> commands -> the rest. A module beside the commands
    that imports one of them (as rebuild.py and models.py once did) is an upward import."""
    upward = [
        str(p.relative_to(SRC))
        for p in _sources()
        if p.parent == SRC
        and p.name != "cli.py"
        and re.search(
            r"^\s*(from gpuhost\.commands|from gpuhost import .*\bcommands\b)", p.read_text(), re.M
        )
    ]
    assert not upward, upward
