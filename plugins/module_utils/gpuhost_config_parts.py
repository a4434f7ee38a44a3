"""Which parts of a server config differ between two versions of its unit and env file
(pure; the module sglang_config_parts reads the files on the host and returns only the
part names, never a value: the env file may hold settings the inventory keeps secret).

Parts, in report order:
  flags  the server's arguments (ExecStart after the interpreter), model arguments aside
  model  --model-path / --revision (a new model or revision of the weights)
  venv   the interpreter ExecStart runs (a different Python environment)
  nccl   NCCL_* lines of the env file (role nccl's decision, copied into it)
  env    every other env line (caches, toolchain, the profile's and inventory's env)
  unit   any other unit line (hardening, limits, dependencies)
"""

from __future__ import annotations

import shlex

PARTS = ("flags", "model", "venv", "nccl", "env", "unit")
MODEL_FLAGS = ("--model-path", "--revision")


def _unescape(text: str) -> str:
    # systemd's own escapes in ExecStart (gpuhost_profile_render.systemd_quote).
    return text.replace("%%", "%").replace("$$", "$")


def _lines(text: str) -> list[str]:
    return [
        line.strip()
        for line in (text or "").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def split_unit(text: str) -> tuple[list[str], list[str]]:
    """(ExecStart argv, the other meaningful unit lines)."""
    argv, other = [], []
    for line in _lines(text):
        if line.startswith("ExecStart="):
            try:
                argv = shlex.split(_unescape(line.split("=", 1)[1]))
            except ValueError:
                argv = [line]
        else:
            other.append(line)
    return argv, other


def _model_and_flags(argv: list[str]) -> tuple[dict, list[str]]:
    model, rest, i = {}, [], 1
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in MODEL_FLAGS:
            if "=" in arg:
                model[name] = arg.split("=", 1)[1]
            else:
                model[name] = argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
        else:
            rest.append(arg)
        i += 1
    return model, rest


def split_env(text: str) -> tuple[dict, dict]:
    """(NCCL_* settings, the other settings) of an EnvironmentFile."""
    nccl, other = {}, {}
    for line in _lines(text):
        name, _, value = line.partition("=")
        (nccl if name.startswith("NCCL_") else other)[name] = value
    return nccl, other


def _without_venv(env: dict, argv: list[str]) -> dict:
    """The env with the interpreter's directory (the venv's bin/, on PATH) replaced by a
    placeholder: a new venv is the part `venv`, not also `env`."""
    bindir = argv[0].rsplit("/", 1)[0] if argv and "/" in argv[0] else ""
    if not bindir:
        return env
    return {name: value.replace(bindir, "<venv>/bin") for name, value in env.items()}


def changed_parts(old_unit: str, new_unit: str, old_env: str, new_env: str) -> list[str]:
    """The parts that differ, in PARTS order; [] when the configs mean the same."""
    old_argv, old_other = split_unit(old_unit)
    new_argv, new_other = split_unit(new_unit)
    old_model, old_flags = _model_and_flags(old_argv)
    new_model, new_flags = _model_and_flags(new_argv)
    old_nccl, old_env_rest = split_env(old_env)
    new_nccl, new_env_rest = split_env(new_env)
    old_env_rest = _without_venv(old_env_rest, old_argv)
    new_env_rest = _without_venv(new_env_rest, new_argv)
    differs = {
        "flags": old_flags != new_flags,
        "model": old_model != new_model,
        "venv": old_argv[:1] != new_argv[:1],
        "nccl": old_nccl != new_nccl,
        "env": old_env_rest != new_env_rest,
        "unit": old_other != new_other,
    }
    return [part for part in PARTS if differs[part]]
