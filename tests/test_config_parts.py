"""What a rollout row says changed (issue 19 item 2): gpuhost_config_parts over units and env
files shaped like the ones role sglang_server renders (ExecStart quoted by
gpuhost_profile_render.exec_start)."""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_config_parts import (
    PARTS,
    changed_parts,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_render import (
    exec_start,
)

PY = "/opt/gpuhost/venv/bin/python"
BASE = [
    PY,
    "/opt/gpuhost/bin/sglang-launch",
    "--model-path",
    "org/model",
    "--revision",
    "a" * 40,
    "--served-model-name",
    "m",
    "--max-running-requests",
    "48",
]
ENV = "# comment\nCUDA_HOME=/usr/local/cuda\nHF_HUB_OFFLINE=1\nNCCL_IB_DISABLE=1\n"


def unit(argv=BASE, extra="MemoryMax=infinity"):
    return f"[Unit]\nDescription=x\n[Service]\n{extra}\nExecStart={exec_start(argv)}\n"


def parts(new_argv=BASE, new_env=ENV, extra="MemoryMax=infinity"):
    return changed_parts(unit(), unit(new_argv, extra), ENV, new_env)


def replace(argv, flag, value):
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def test_the_same_config_changes_nothing_comments_and_blank_lines_aside():
    assert parts() == []
    assert parts(new_env="\n" + ENV + "# another comment\n") == []


def test_each_part_alone():
    assert parts(replace(BASE, "--max-running-requests", "64")) == ["flags"]
    assert parts(replace(BASE, "--revision", "b" * 40)) == ["model"]
    assert parts(replace(BASE, "--model-path", "org/other")) == ["model"]
    assert parts([f"/opt/gpuhost/venvs/{'c' * 12}/bin/python", *BASE[1:]]) == ["venv"]
    assert parts(new_env=ENV.replace("NCCL_IB_DISABLE=1", "NCCL_IB_DISABLE=0")) == ["nccl"]
    assert parts(new_env=ENV + "NCCL_SOCKET_IFNAME=lo\n") == ["nccl"]
    assert parts(new_env=ENV + "SGLANG_STANDIN_FAULT=never-healthy\n") == ["env"]
    assert parts(extra="MemoryMax=100G") == ["unit"]


def test_a_new_venv_on_path_is_the_venv_not_the_env():
    # sglang_server puts the venv's bin/ on the server's PATH (its tools, e.g. ninja for the
    # JIT): a lock change moves it there too, and the row says `venv` only.
    new_py = f"/opt/gpuhost/venvs/{'d' * 16}/bin/python"
    path = "PATH=/usr/local/cuda/bin:{}:/usr/bin\n"
    old_env, new_env = ENV + path.format("/opt/gpuhost/venv/bin"), ENV + path.format(new_py[:-7])
    new_unit = unit([new_py, *BASE[1:]])
    assert changed_parts(unit(), new_unit, old_env, new_env) == ["venv"]
    # Another PATH change besides is still the env's.
    other = new_env.replace(":/usr/bin", ":/srv/bin")
    assert changed_parts(unit(), new_unit, old_env, other) == ["venv", "env"]
    # The same venv and another PATH: env.
    assert changed_parts(unit(), unit(), old_env, ENV + path.format("/srv/bin")) == ["env"]


def test_several_parts_in_report_order_and_flag_spellings():
    both = replace(replace(BASE, "--revision", "b" * 40), "--max-running-requests", "64")
    assert parts(both, ENV + "X=1\n") == ["flags", "model", "env"]
    # --flag=value spells the same model argument; a quoted value survives systemd quoting.
    eq = [BASE[0], BASE[1], "--model-path=org/model", *BASE[4:]]
    assert parts(eq) == []
    assert parts([*BASE, "--chat-template", "a b%c"]) == ["flags"]
    assert set(PARTS) == {"flags", "model", "venv", "nccl", "env", "unit"}


def test_no_known_good_copy_yet_names_every_part_present():
    assert changed_parts("", unit(), "", ENV) == ["flags", "model", "venv", "nccl", "env", "unit"]
