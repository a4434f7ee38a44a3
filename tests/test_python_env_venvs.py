"""Side-by-side venvs (issue 19, item 1): one venv per lock under python_env_venvs_dir,
python_env_venv_dir a link to the current one, sglang_server's unit naming the venv itself,
and the rule of which venvs are kept (plugins/module_utils/gpuhost_python_env.py venv_plan,
read by the probe plugins/modules/python_env_probe.py)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_python_env as pe
from ansible_collections.gpuhost.gpu.plugins.modules import python_env_probe as probe_module

ROOT = Path(__file__).resolve().parents[1]
VENVS = "/opt/gpuhost/venvs"
LINK = "/opt/gpuhost/venv"
A, B, C, D = (f"{VENVS}/{c * 16}" for c in "abcd")


def _venv(path, time, verified=True):
    return {"path": path, "time": time, "verified": verified, "lock_sha256": ""}


def test_venv_name_is_the_locks_digest_prefix():
    digest = hashlib.sha256(b"six==1.17.0\n").hexdigest()
    assert pe.venv_name(digest) == digest[:16]
    assert pe.venv_name(digest.upper()) == digest[:16]
    for bad in ("", "abc", "z" * 64, digest + "0"):
        with pytest.raises(pe.LockError, match="64 hex digits"):
            pe.venv_name(bad)


def test_first_run_creates_the_link():
    plan = pe.venv_plan({"link": {"kind": "absent"}, "venvs": []}, A, LINK, 2)
    assert plan == {
        "link": "create",
        "legacy_users": [],
        "prune": [],
        "kept": {A: "the venv of this run's lock"},
    }


def test_unchanged_lock_is_a_no_op():
    probe = {"link": {"kind": "link", "target": A}, "venvs": [_venv(A, 10)]}
    plan = pe.venv_plan(probe, A, LINK, 2)
    assert plan["link"] == "ok"
    assert plan["prune"] == []
    # A relative link target counts from the link's directory.
    probe["link"]["target"] = "venvs/" + "a" * 16
    assert pe.venv_plan(probe, A, LINK, 2)["link"] == "ok"


def test_new_lock_switches_and_keeps_the_previous_venv():
    probe = {"link": {"kind": "link", "target": A}, "venvs": [_venv(A, 10)]}
    plan = pe.venv_plan(probe, B, LINK, 2)
    assert plan["link"] == "switch"
    assert plan["prune"] == []
    assert A in plan["kept"]


def test_older_venvs_go_beyond_the_count_unless_a_config_names_them():
    venvs = [_venv(A, 10), _venv(B, 20), _venv(C, 30)]
    probe = {"link": {"kind": "link", "target": C}, "venvs": venvs}
    # keep 2: D (current) and C (the newest other); A and B go.
    assert pe.venv_plan(probe, D, LINK, 2)["prune"] == [A, B]
    # A kept config (the previous unit) names A: it stays, on top of the count.
    probe["references"] = {A: ["/var/lib/gpuhost/rolling_update/previous/unit"], B: [], C: []}
    plan = pe.venv_plan(probe, D, LINK, 2)
    assert plan["prune"] == [B]
    assert plan["kept"][A] == "named by /var/lib/gpuhost/rolling_update/previous/unit"
    # keep 1: only the current one and what a config names.
    assert pe.venv_plan(probe, D, LINK, 1)["prune"] == [B, C]
    assert pe.venv_plan(probe, D, LINK, 4)["prune"] == []


def test_a_venv_never_verified_goes_first():
    # A failed build (a bad lock) has no marker: it never counts among the newest.
    venvs = [_venv(A, 10), _venv(B, 99, verified=False)]
    probe = {"link": {"kind": "link", "target": A}, "venvs": venvs}
    assert pe.venv_plan(probe, C, LINK, 2)["prune"] == [B]
    # ...but a unit naming it keeps it (a server runs from it).
    probe["references"] = {B: ["/etc/systemd/system/sglang-server.service"]}
    assert pe.venv_plan(probe, C, LINK, 2)["prune"] == []


def test_switching_back_keeps_the_venv_switched_from():
    venvs = [_venv(A, 10), _venv(B, 20)]
    probe = {"link": {"kind": "link", "target": B}, "venvs": venvs}
    plan = pe.venv_plan(probe, A, LINK, 2)
    assert plan["link"] == "switch"
    assert plan["prune"] == []


def test_venv_directory_of_an_earlier_release():
    # Nothing names it: replaced by the link (the new venv was built beside it).
    probe = {"link": {"kind": "dir"}, "venvs": [], "references": {LINK: []}}
    assert pe.venv_plan(probe, A, LINK, 2)["link"] == "replace_dir"
    # The running unit names it: it stays until the server runs from a venv of venvs_dir.
    unit = "/etc/systemd/system/sglang-server.service"
    probe["references"] = {LINK: [unit]}
    plan = pe.venv_plan(probe, A, LINK, 2)
    assert plan["link"] == "keep_dir"
    assert plan["legacy_users"] == [unit]


def test_bad_count_and_a_file_at_the_link_are_named():
    with pytest.raises(ValueError, match=r"python_env_venvs_keep: got 0; allowed: an integer >= 1"):
        pe.venv_plan({}, A, LINK, 0)
    with pytest.raises(ValueError, match=r"python_env_venv_dir: /opt/gpuhost/venv is a other"):
        pe.venv_plan({"link": {"kind": "other"}}, A, LINK, 2)


def _make_venv(root: Path, name: str, lock_sha256: str | None, time: float) -> Path:
    path = root / name
    (path / "bin").mkdir(parents=True)
    if lock_sha256 is not None:
        marker = path / "gpuhost-env.json"
        marker.write_text(json.dumps({"lock_sha256": lock_sha256}))
        os.utime(marker, (time, time))
    else:
        os.utime(path, (time, time))
    return path


def test_probe_reads_the_venvs_the_link_and_who_names_them(tmp_path):
    venvs = tmp_path / "venvs"
    a = _make_venv(venvs, "a" * 16, "a" * 64, 100)
    b = _make_venv(venvs, "b" * 16, None, 200)
    (venvs / "not-a-venv").mkdir()
    (venvs / ("c" * 16)).symlink_to(a)
    link = tmp_path / "venv"
    link.symlink_to(a)
    units = tmp_path / "system"
    units.mkdir()
    (units / "sglang-server.service").write_text(f"ExecStart={a}/bin/python -m x\n")
    (units / "other.service").write_text(f"ExecStart={link}/bin/python\n")
    (units / "ignored.service").symlink_to(units / "sglang-server.service")
    kept = tmp_path / "state/rolling_update/previous"
    kept.mkdir(parents=True)
    (kept / "unit").write_text(f"ExecStart={b}/bin/python\n")
    os.mkfifo(kept / "fifo")  # never opened (it would block)

    found = probe_module._venvs(str(venvs), "gpuhost-env.json")
    assert [(v["path"], v["verified"], v["time"]) for v in found] == [
        (str(a), True, 100),
        (str(b), False, 200),
    ]
    assert found[0]["lock_sha256"] == "a" * 64
    assert probe_module._link_state(str(link)) == {"kind": "link", "target": str(a)}
    assert probe_module._link_state(str(tmp_path / "none"))["kind"] == "absent"
    assert probe_module._link_state(str(venvs))["kind"] == "dir"
    refs = probe_module._references(
        [str(units), str(tmp_path / "state")], [str(a), str(b), str(link)]
    )
    assert refs == {
        str(a): [str(units / "sglang-server.service")],
        str(b): [str(kept / "unit")],
        str(link): [str(units / "other.service")],
    }
    # The probe's result feeds the plan: a new lock D keeps a (a unit), b (a kept config).
    plan = pe.venv_plan(
        {"link": probe_module._link_state(str(link)), "venvs": found, "references": refs},
        str(venvs / ("d" * 16)),
        str(link),
        1,
    )
    assert plan["link"] == "switch"
    assert plan["prune"] == []


def _sglang_vars():
    return yaml.safe_load((ROOT / "roles/sglang_server/vars/main.yml").read_text())


def _render(expr: str, **variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    # Trusted as the role's vars file is when Ansible loads it.
    trusted = {
        k: trust_as_template(v) if isinstance(v, str) else v for k, v in _sglang_vars().items()
    }
    templar = Templar(loader=DataLoader(), variables={**trusted, **variables})
    return templar.template(trust_as_template(expr))


BASE = {
    "gpuhost_base_dir": "/opt/gpuhost",
    "python_env_venv_dir": LINK,
    "sglang_server_entrypoint": [f"{LINK}/bin/python", "-m", "sglang.launch_server"],
}


def _read(stats):
    """The role's one read (gpuhost.gpu.path_stats, registered as _sglang_server_read)."""
    return {"_sglang_server_read": {"results": [{"item": p, "stat": s} for p, s in stats.items()]}}


def test_the_interpreter_is_looked_at_where_the_unit_names_it():
    """preflight.yml's one read looks at the entry point under the link and under python_env's
    venv; the interpreter the unit names is found in it (tasks/preflight.yml, runnable)."""
    expr = "{{ _sglang_server_interpreter_stat.exists }}"
    link = {"exists": True, "islnk": True, "lnk_target": A}
    here, gone = {"exists": True, "islnk": True}, {"exists": False}
    # The link leads to A: the interpreter under the link is the one in A.
    assert _render(expr, **BASE, **_read({LINK: link, f"{LINK}/bin/python": here}))
    assert not _render(expr, **BASE, **_read({LINK: link, f"{LINK}/bin/python": gone}))
    # Check mode names the venv python_env would build (B): that path's own look counts.
    got = _render(
        expr, **BASE, **_read({LINK: link, f"{LINK}/bin/python": here, f"{B}/bin/python": gone}),
        gpuhost_python_env={"venv_path": B}, ansible_check_mode=True,
    )  # fmt: skip
    assert not got
    # A relative link target is no venv the unit could name.
    rel = {"exists": True, "islnk": True, "lnk_target": "venvs/a"}
    assert not _render(expr, **BASE, **_read({LINK: rel, f"{LINK}/bin/python": here}))
    # Before the read (validate.yml from a playbook): nothing found, nothing assumed.
    assert not _render(expr, **BASE)


def test_the_unit_names_the_venv_not_the_link():
    expr = "{{ _sglang_server_entrypoint }}"
    link_to = _read({LINK: {"exists": True, "islnk": True, "lnk_target": A}})
    got = _render(expr, **BASE, **link_to)
    assert got == [f"{A}/bin/python", "-m", "sglang.launch_server"]
    # The host's link wins over a fact (the cache may be stale); python_env, when it ran in
    # this play, moved the link already, so both agree then.
    got = _render(expr, **BASE, **link_to, gpuhost_python_env={"venv_path": B})
    assert got[0] == f"{A}/bin/python"
    # Check mode moves no link: the venv python_env would build is what the unit would name.
    got = _render(
        expr, **BASE, **link_to, gpuhost_python_env={"venv_path": B}, ansible_check_mode=True
    )
    assert got[0] == f"{B}/bin/python"
    # No link (a venv directory of an earlier release, or none yet): python_env's fact.
    no_link = _read({LINK: {"exists": True, "islnk": False}})
    got = _render(expr, **BASE, **no_link, gpuhost_python_env={"venv_path": B})
    assert got[0] == f"{B}/bin/python"
    # No link, no fact (python_env off): the entry point as given.
    assert _render(expr, **BASE)[0] == f"{LINK}/bin/python"
    # An entry point outside the link is left alone.
    other = {**BASE, "sglang_server_entrypoint": ["/srv/py/bin/python", "-m", "x"]}
    got = _render(expr, **other, gpuhost_python_env={"venv_path": B})
    assert got[0] == "/srv/py/bin/python"


def test_a_check_run_caches_no_venv_it_did_not_build():
    tasks = yaml.safe_load((ROOT / "roles/python_env/tasks/main.yml").read_text())
    export = next(
        t for t in tasks if "gpuhost_python_env" in str(t.get("ansible.builtin.set_fact"))
    )
    assert export["ansible.builtin.set_fact"]["cacheable"] == "{{ not ansible_check_mode }}"


def test_the_places_that_keep_venvs_are_root_only_and_name_the_kept_configs():
    pe_vars = yaml.safe_load((ROOT / "roles/python_env/vars/main.yml").read_text())
    refs = pe_vars["_python_env_venv_references"]
    ru_vars = yaml.safe_load((ROOT / "roles/rolling_update/vars/main.yml").read_text())
    ss_vars = _sglang_vars()
    # Every directory a kept unit lives in is under one of the places the probe reads.
    for kept in (
        ru_vars["_rolling_update_previous_dir"],
        ru_vars["_rolling_update_pending_dir"],
        ss_vars["_sglang_server_known_good_dir"],
    ):
        assert any(kept.startswith(r + "/") for r in refs), kept
    # Never the server's own state dir (it could plant files there).
    assert not any("gpuhost_service_state_dir" in r for r in refs)
    assert "{{ gpuhost_state_dir }}" not in refs
