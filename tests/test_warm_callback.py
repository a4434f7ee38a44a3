"""The callback gpuhost.gpu.warm (plugins/callback/warm.py).

ansible-playbook forks a worker per task; a worker that templates a gpuhost.gpu filter makes
ansible-core's Jinja plugin loader import every file of plugins/filter, and one that runs a
gpuhost action imports it, each time anew. The callback imports them in the main process when
the playbook starts, so the workers inherit them. It must load all of them, be what ansible.cfg
enables, and load there (a callback that fails to load is skipped with only a warning).

The in-process check runs in a child Python: the plugin loader it sets up is global.
"""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
import textwrap

from gpuhost_fakes import ROOT, run_playbook

PROBE = textwrap.dedent(
    """
    import json, sys
    from ansible.plugins.loader import callback_loader, init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    prefix = "ansible_collections.gpuhost.gpu.plugins."
    kinds = (prefix + "filter.", prefix + "action.")
    before = sorted(m for m in sys.modules if m.startswith(kinds))
    callback_loader.get("gpuhost.gpu.warm").v2_playbook_on_start(None)
    after = sorted(m for m in sys.modules if m.startswith(prefix))
    print(json.dumps({"before": before, "after": after}))
    """
)


def test_it_imports_every_filter_and_action_file():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / ".collections")],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert loaded["before"] == []
    for kind in ("filter", "action"):
        files = sorted(p.stem for p in (ROOT / "plugins" / kind).glob("*.py"))
        assert files
        for stem in files:
            assert f"ansible_collections.gpuhost.gpu.plugins.{kind}.{stem}" in loaded["after"], stem


def test_ansible_cfg_enables_it_and_it_loads(tmp_path):
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    enabled = [c.strip() for c in config["defaults"]["callbacks_enabled"].split(",")]
    assert "gpuhost.gpu.warm" in enabled
    play = tmp_path / "play.yml"
    play.write_text(
        textwrap.dedent(
            """
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: Use a filter of the collection in a worker
                  ansible.builtin.assert:
                    that: "'127.0.0.1' | gpuhost.gpu.is_loopback"
            """
        )
    )
    proc = run_playbook(["-v", "-i", "localhost,", "-c", "local", play], tmp_path / "facts")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # ansible-core skips a callback it cannot find or construct, saying so only as a warning
    # ("Skipping callback plugin 'x', unable to load", "... does not create a valid plugin").
    assert "Skipping callback" not in out, out
