"""This run's host read instead of Ansible's fact gathering (issue 29 item 6: one remote call
and one module fewer in a no-op run). The roles key on gpuhost_host (docs/facts.md: OS,
architecture, kernel, container, systemd's version), which preflight's gpu_facts call reads;
playbooks/facts.yml reads it where preflight did not run in this run, never taking the fact
cache's copy; no play runs ansible.builtin.setup."""

from __future__ import annotations

import json
import os
import re
import sys

import yaml
from ansible_collections.gpuhost.gpu.plugins.cache.factfile import _KEY_PREFIX, decode, encode
from gpuhost_fakes import ROOT, run_playbook

PLAYS = [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]
ROLE_FILES = sorted(
    p for p in (ROOT / "roles").rglob("*") if p.is_file() and p.suffix in (".yml", ".j2")
)
# What Ansible's setup module sets and nothing here may read any more (a registered result's
# own `ansible_facts`, what an action returned, is not the host's).
ANSIBLE_FACT_READ = re.compile(
    r"(?<![.\w])ansible_facts\b|ansible_(distribution|os_family|architecture|kernel|virtualization"
    r"|systemd|service_mgr|pkg_mgr|lsb|machine)\w*"
)


def test_no_play_gathers_ansible_facts():
    gathering = [
        f"{path.relative_to(ROOT)}: {play.get('name')}"
        for path in PLAYS
        for play in yaml.safe_load(path.read_text()) or []
        if "hosts" in play and play.get("gather_facts") is not False
    ]
    assert not gathering, f"plays that would run ansible.builtin.setup: {gathering}"
    setup = [
        str(p.relative_to(ROOT))
        for p in [*PLAYS, *ROLE_FILES]
        if re.search(r"ansible\.builtin\.setup:|gather_subset", p.read_text())
    ]
    assert not setup, setup


def test_roles_read_this_runs_host_facts_not_ansibles():
    reads = {
        str(p.relative_to(ROOT)): sorted({m.group(0) for m in ANSIBLE_FACT_READ.finditer(t)})
        for p in [*ROLE_FILES, *PLAYS]
        if ANSIBLE_FACT_READ.search(t := p.read_text())
    }
    assert not reads, reads


def test_the_checks_above_see_what_they_look_for():
    assert ANSIBLE_FACT_READ.search("{{ ansible_facts['distribution'] }}")
    assert ANSIBLE_FACT_READ.search("{{ ansible_kernel }}")
    assert not ANSIBLE_FACT_READ.search("{{ ansible_check_mode }} {{ ansible_host }}")
    assert not ANSIBLE_FACT_READ.search("{{ (_result.ansible_facts | default({})).x }}")
    assert ANSIBLE_FACT_READ.search("{{ (ansible_facts | default({})).x }}")
    assert len(ROLE_FILES) > 100 and ROOT / "playbooks" / "facts.yml" in PLAYS


def test_the_stages_that_key_on_the_host_import_the_facts_play():
    """host.yml (nvidia_driver, cuda_repo), serve.yml (the unit), update.yml (both) and site.yml
    import playbooks/facts.yml; site.yml once, after preflight, telling its stages."""

    def imports(name):
        path = ROOT / "site.yml" if name == "site.yml" else ROOT / "playbooks" / name
        return [
            p for p in yaml.safe_load(path.read_text()) if "ansible.builtin.import_playbook" in p
        ]

    for name in ("host.yml", "serve.yml", "update.yml"):
        names = [p["ansible.builtin.import_playbook"] for p in imports(name)]
        assert "facts.yml" in names, name
    site = [
        p
        for p in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
        if "ansible.builtin.import_playbook" in p
    ]
    order = [p["ansible.builtin.import_playbook"] for p in site]
    assert order.index("preflight.yml") < order.index("facts.yml") < order.index("host.yml")
    for stage in site:
        if stage["ansible.builtin.import_playbook"] in ("host.yml", "serve.yml"):
            assert stage["vars"]["_gpuhost_site_facts"] is True, stage["name"]
    facts = yaml.safe_load((ROOT / "playbooks" / "facts.yml").read_text())
    assert "':!all' if _gpuhost_site_facts" in facts[0]["hosts"]
    assert facts[0]["tags"] == ["always"]


def _local(tmp_path, playbook, *extra):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n        localhost:\n"
        "          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    return run_playbook(
        [playbook, "-i", inventory, "-e", "ansible_become=false",
         "-e", f"gpuhost_cache_dir={tmp_path}/cache", *extra],
        tmp_path / "facts",
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
        timeout=180,
    )  # fmt: skip


def _results(stdout, fragment):
    run = json.JSONDecoder().raw_decode(stdout[stdout.index("{") :])[0]
    return [
        task["hosts"]["localhost"]
        for play in run["plays"]
        for task in play["tasks"]
        if fragment in task["task"]["name"]
    ]


def test_facts_play_reads_this_run_and_replaces_the_caches_stale_copy(tmp_path):
    """A fact cache from an earlier run (another kernel, no arch) is not taken: the facts
    play reads the host now and writes this run's gpuhost_host back to the cache."""
    (tmp_path / "facts").mkdir()
    stale = {"gpuhost_host": {"kernel": {"release": "0.0-stale"}}, "gpuhost_gpu": {"count": 9}}
    cache_file = tmp_path / "facts" / (_KEY_PREFIX + "localhost")
    cache_file.write_text(json.dumps(encode(stale)))
    proc = _local(tmp_path, "playbooks/facts.yml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (read,) = _results(proc.stdout, "Read GPU and host facts when this run has not")
    assert read.get("skipped") is not True, read
    cached = decode(json.loads(cache_file.read_text()))
    host = cached["gpuhost_host"]
    assert host["kernel"]["release"] == os.uname().release
    assert host["arch"] == os.uname().machine
    assert host["os"]["id"] != "unknown" and "systemd_version" in host["init"]
    assert list(host["disk"]) == [f"{tmp_path}/cache"]  # preflight's disk paths, as preflight
    # gpuhost_gpu already known is kept, as before: molecule's recorded GPUs (a test double
    # set by the converge) must survive the read of a container without one.
    assert cached["gpuhost_gpu"] == {"count": 9}


def test_facts_play_reads_nothing_when_this_run_has(tmp_path):
    """After this run's read (preflight's, registered gpuhost_facts_read) the play runs no
    module: the include is skipped."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: gpu_hosts\n  gather_facts: false\n  tasks:\n"
        "    - name: This run's read (as preflight registers it)\n"
        "      ansible.builtin.set_fact:\n"
        "        gpuhost_facts_read: {gpuhost_host: {}, gpuhost_gpu: {}}\n"
        f"- ansible.builtin.import_playbook: {ROOT}/playbooks/facts.yml\n"
    )
    proc = _local(tmp_path, play)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (include,) = _results(proc.stdout, "Read the GPU and host facts when preflight has not")
    assert include.get("skipped") is True, include
    assert not _results(proc.stdout, "Read GPU and host facts when this run has not")
    assert not (tmp_path / "facts" / (_KEY_PREFIX + "localhost")).exists()
