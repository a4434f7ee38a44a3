"""The fact cache plugin gpuhost.gpu.factfile (plugins/cache/factfile.py).

It must write and read the files ansible.builtin.jsonfile does (later runs, tools and the other
plugin read them), decode a host's facts once per run (the point of it: ansible-core decodes a
persistent plugin's whole document on every read, once or twice a task), keep jsonfile's expiry,
and be what ansible.cfg names, loaded (a cache plugin that fails to load is replaced by the
memory cache with only a warning, and the facts of a run would then be lost to the next).

The in-process checks run in a child Python: the plugin loader they set up is global.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    from ansible.plugins.loader import cache_loader, init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    import ansible_collections.gpuhost.gpu.plugins.cache.factfile as factfile

    cache_dir, what = sys.argv[2], sys.argv[3]
    decodes = []
    real_decode = factfile.decode
    factfile.decode = lambda stored: decodes.append(1) or real_decode(stored)
    out = {}
    if what == "write-factfile":
        plugin = cache_loader.get("gpuhost.gpu.factfile", _uri=cache_dir)
        plugin.set("h1", {"gpu": {"count": 8, "names": ["A", "B"]}, "text": "{{ not templated }}"})
    elif what == "write-jsonfile":
        plugin = cache_loader.get("ansible.builtin.jsonfile", _uri=cache_dir)
        plugin.set("h2", {"driver": {"branch": 580}})
    elif what == "read":
        plugin = cache_loader.get("gpuhost.gpu.factfile", _uri=cache_dir)
        out["class"] = type(plugin).__name__
        out["h2"] = plugin.get("h2")
        for _ in range(50):
            out["h1"] = plugin.get("h1")
        out["decodes"] = len(decodes)
        plugin.set("h1", {**out["h1"], "more": 1})
        out["h1_after_set"] = plugin.get("h1")
        out["decodes_after_set"] = len(decodes)
        out["keys"] = sorted(plugin.keys())
        builtin = cache_loader.get("ansible.builtin.jsonfile", _uri=cache_dir)
        out["builtin_h1"] = builtin.get("h1")
    elif what == "expired":
        plugin = cache_loader.get("gpuhost.gpu.factfile", _uri=cache_dir, _timeout=60)
        for name in os.listdir(cache_dir):
            os.utime(os.path.join(cache_dir, name), (time.time() - 3600, time.time() - 3600))
        try:
            plugin.get("h1")
            out["expired"] = False
        except KeyError:
            out["expired"] = True
        out["contains"] = plugin.contains("h1")
    print(json.dumps(out))
    """
)


def probe(cache_dir: Path, what: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / ".collections"), str(cache_dir), what],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_same_files_as_jsonfile_and_decoded_once(tmp_path):
    probe(tmp_path, "write-factfile")
    probe(tmp_path, "write-jsonfile")
    got = probe(tmp_path, "read")
    # Not wrapped by ansible-core's decode-on-every-read layer.
    assert got["class"] == "CacheModule"
    # What jsonfile wrote, factfile reads; and the other way round.
    assert got["h2"] == {"driver": {"branch": 580}}
    assert got["builtin_h1"] == {
        "gpu": {"count": 8, "names": ["A", "B"]},
        "text": "{{ not templated }}",
        "more": 1,
    }
    # One decode per host: h2 read once, h1 read 50 times. A write keeps the value, no decode.
    assert got["decodes"] == 2
    assert got["h1_after_set"]["more"] == 1
    assert got["decodes_after_set"] == 2
    assert got["keys"] == ["h1", "h2"]
    # The file names are jsonfile's (schema-prefixed), nothing else in the directory.
    assert sorted(os.listdir(tmp_path)) == ["s1_h1", "s1_h2"]


def test_an_expired_file_is_not_read(tmp_path):
    probe(tmp_path, "write-factfile")
    assert probe(tmp_path, "expired") == {"expired": True, "contains": False}


def test_ansible_cfg_uses_it_and_it_loads(tmp_path):
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert config["defaults"]["fact_caching"] == "gpuhost.gpu.factfile"

    play = tmp_path / "play.yml"
    play.write_text(
        textwrap.dedent(
            """
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: Cache a fact
                  ansible.builtin.set_fact:
                    probe_fact: {value: 41}
                    cacheable: true
                  when: step == "set"
                - name: Read it back from the cache in the next run
                  ansible.builtin.assert:
                    that: probe_fact.value == 41
                  when: step == "get"
            """
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = Path(sys.executable).parent / "ansible-playbook"
    for step in ("set", "get"):
        proc = subprocess.run(
            [str(playbook), "-i", "localhost,", "-c", "local", str(play), "-e", f"step={step}"],
            capture_output=True, text=True, cwd=ROOT, env=env, check=False,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        # A cache plugin that does not load is replaced by the memory cache with a warning.
        assert "cache plugin" not in out.lower(), out
    assert (tmp_path / "facts" / "s1_localhost").is_file()
