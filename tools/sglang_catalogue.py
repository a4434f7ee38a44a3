#!/usr/bin/env python3
"""Build the SGLang server-argument catalogue from the real wheel's argparse.

The catalogue (data/sglang/catalogue-<version>.json) lists every `sglang.launch_server`
flag with its aliases, type, action, choices, default and help, so the control node can
validate serving profiles without importing torch (plugins/plugin_utils/gpuhost_catalogue.py
reads it). It is never written by hand: it comes from `ServerArgs.add_cli_args` of the
wheel pinned by a lock under locks/.

    tools/sglang_catalogue.py build --lock locks/sglang-0.5.10.post1-cu128.txt
    tools/sglang_catalogue.py check --lock locks/sglang-0.5.10.post1-cu128.txt
    <venv>/bin/python tools/sglang_catalogue.py dump      # inside a venv that has sglang

`build` and `check` sync a venv for the lock under .cache/sglang-venvs/ (uv, hashes
required, hard links into uv's cache, so a warm cache makes this seconds) and run `dump`
in it. Importing sglang.srt.server_args needs torch but no GPU.

Exit status: 0 ok, 1 the committed catalogue differs from the wheel (check), 2 usage or
environment error.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "sglang"
VENV_ROOT = ROOT / ".cache" / "sglang-venvs"
SCHEMA = 1
# Builders whose values argparse parses as JSON; sglang names a few of its own.
_JSON_TYPES = {"loads", "json_list_type"}
# sglang's converters that still yield the named scalar (1k-style ints, "None"-able strings).
_SCALAR_TYPES = {"human_readable_int": "int", "nullable_str": "str"}
# sglang marks a deprecated flag by its help's first word ("[Deprecated] Use ...",
# "(Deprecated: use ...)"); a help that merely mentions a deprecated flag does not count.
_DEPRECATED_HELP = re.compile(r"^[\[(]?\s*deprecated\b", re.IGNORECASE)
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


class CatalogueError(Exception):
    """A usage or environment problem (exit status 2)."""


# --- dump: runs inside the sglang venv, stdlib + sglang only -----------------------------


def _jsonable(value: Any) -> Any:
    """JSON-safe, run-independent form of an argparse default or choice."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return _jsonable(enum_value)
    # Objects print their address; drop it so two runs give the same text.
    return _ADDRESS.sub("", str(value))


def _action_name(action: argparse.Action, registry: dict[type, str]) -> str:
    cls = type(action)
    if cls in registry:
        return registry[cls]
    if cls is getattr(argparse, "BooleanOptionalAction", None):
        return "boolean_optional"
    return cls.__name__


def _type_names(action: argparse.Action) -> tuple[str | None, str | None]:
    """(value type, converter name): the type a value must parse as, and sglang's own
    converter when it is not a builtin (it widens what is accepted, e.g. "1k")."""
    if action.nargs == 0:
        return ("bool" if not isinstance(action, argparse._HelpAction) else None), None
    conv = action.type
    if conv is None or conv is str:
        return "str", None
    if conv in (int, float, bool):
        return conv.__name__, None
    name = getattr(conv, "__name__", type(conv).__name__)
    if name in _JSON_TYPES:
        return "json", name
    return _SCALAR_TYPES.get(name, name), name


def _choices(choices: Any) -> list[Any] | None:
    if choices is None:
        return None
    # sglang keeps some choices in sets: their order changes with the hash seed.
    if isinstance(choices, set | frozenset):
        return _jsonable(choices)
    return _jsonable(list(choices))


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str | None:
    if action.help is None or action.help is argparse.SUPPRESS:
        return None
    try:
        text = parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        text = action.help
    return " ".join(text.split())


def catalogue_from_parser(parser: argparse.ArgumentParser, version: str) -> dict[str, Any]:
    """The catalogue of a built parser (pure: the unit tests feed it their own parsers)."""
    registry = {cls: name for name, cls in parser._registries["action"].items() if name}
    flags: dict[str, Any] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        key = (longs or action.option_strings or [action.dest])[0]
        value_type, converter = _type_names(action)
        help_text = _help_text(parser, action)
        deprecated = bool(getattr(action, "deprecated", False))
        deprecated = deprecated or "Deprecated" in type(action).__name__
        deprecated = deprecated or bool(help_text and _DEPRECATED_HELP.search(help_text))
        flags[key] = {
            "dest": action.dest,
            "aliases": list(action.option_strings),
            "action": _action_name(action, registry),
            "type": value_type,
            "converter": converter,
            "choices": _choices(action.choices),
            "default": None if action.default is argparse.SUPPRESS else _jsonable(action.default),
            "nargs": action.nargs,
            "required": bool(action.required),
            "deprecated": deprecated,
            "help": help_text,
        }
    return {
        "schema": SCHEMA,
        "sglang_version": version,
        "generator": "tools/sglang_catalogue.py",
        "parser": {"allow_abbrev": parser.allow_abbrev, "prefix_chars": parser.prefix_chars},
        "flags": flags,
    }


def dump_catalogue() -> dict[str, Any]:
    """The catalogue of the sglang importable by this interpreter."""
    from importlib.metadata import version

    from sglang.srt.server_args import ServerArgs

    # The same parser `python -m sglang.launch_server` builds (prepare_server_args).
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return catalogue_from_parser(parser, version("sglang"))


def render(catalogue: dict[str, Any]) -> str:
    """Stable text: sorted keys, fixed indent, one trailing newline."""
    return json.dumps(catalogue, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- build/check: run on the control machine ---------------------------------------------


def lock_sglang_version(lock: Path) -> str:
    match = re.search(r"^sglang==(\S+)", lock.read_text(), re.MULTILINE)
    if not match:
        raise CatalogueError(f"{lock}: no sglang==<version> pin")
    return match.group(1)


def lock_python_version(lock: Path) -> str:
    """The --python-version the lock was compiled for (uv writes its command line)."""
    match = re.search(r"--python-version[ =](\d+\.\d+)", lock.read_text())
    return match.group(1) if match else f"{sys.version_info[0]}.{sys.version_info[1]}"


def find_uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise CatalogueError("uv not found: run `make venv` or put uv on PATH")
    return found


def ensure_venv(lock: Path, venv_root: Path = VENV_ROOT) -> Path:
    """A venv holding exactly `lock`, reused while the lock is unchanged."""
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:12]
    stem = lock.name.removesuffix(".txt")
    venv = venv_root / f"{stem}-{digest}"
    done = venv / ".gpuhost-synced"
    if done.exists():
        return venv
    venv_root.mkdir(parents=True, exist_ok=True)
    # An older venv of the same lane is ~11 GB of links; drop it before making the new one.
    for old in venv_root.glob(f"{stem}-*"):
        if old != venv:
            shutil.rmtree(old, ignore_errors=True)
    uv = find_uv()
    # uv must not fetch a Python (no network for that here): use one installed locally.
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "VIRTUAL_ENV": str(venv)}
    env.pop("UV_PYTHON", None)
    python = lock_python_version(lock)
    steps = [
        [uv, "venv", "--quiet", "--clear", "--python", python, str(venv)],
        [uv, "pip", "sync", "--quiet", "--require-hashes", "--no-build", str(lock)],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CatalogueError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    done.write_text(digest + "\n")
    return venv


def run_dump(venv: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="sglang-catalogue-") as scratch:
        out = Path(scratch) / "catalogue.json"
        # A clean environment and a throw-away HOME: the catalogue must not depend on who
        # runs it or on caches sglang's imports may write.
        env = {
            "PATH": os.defpath,
            "HOME": scratch,
            "PYTHONNOUSERSITE": "1",
            "PYTHONHASHSEED": "0",
            "CUDA_VISIBLE_DEVICES": "",
        }
        cmd = [str(venv / "bin" / "python"), "-W", "ignore", str(Path(__file__).resolve())]
        proc = subprocess.run(
            [*cmd, "dump", "--output", str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise CatalogueError(f"dump in {venv} failed:\n{proc.stderr.strip()[-4000:]}")
        return out.read_text()


def catalogue_path(version: str, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"catalogue-{version}.json"


def build(lock: Path, output: Path | None, venv_root: Path = VENV_ROOT) -> Path:
    text = run_dump(ensure_venv(lock, venv_root))
    version = json.loads(text)["sglang_version"]
    if version != lock_sglang_version(lock):
        raise CatalogueError(f"{lock} pins sglang {lock_sglang_version(lock)}, venv has {version}")
    output = output or catalogue_path(version)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return output


def check(lock: Path, committed: Path | None, venv_root: Path = VENV_ROOT) -> list[str]:
    """Unified diff of the committed catalogue against the wheel's; empty when equal."""
    fresh = run_dump(ensure_venv(lock, venv_root))
    committed = committed or catalogue_path(lock_sglang_version(lock))
    old = committed.read_text() if committed.exists() else ""
    return list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            fresh.splitlines(keepends=True),
            str(committed),
            f"{lock} (fresh)",
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump", help="the catalogue of the sglang this Python imports")
    # A file, not stdout: sglang's imports may print.
    dump.add_argument("--output", type=Path, help="write here instead of stdout")
    for name in ("build", "check"):
        p = sub.add_parser(name, help=f"{name} the catalogue for a lock's sglang")
        p.add_argument("--lock", type=Path, required=True)
        p.add_argument("--output", type=Path, help="catalogue path (default data/sglang/)")
    args = parser.parse_args(argv)
    try:
        if args.command == "dump":
            text = render(dump_catalogue())
            if args.output:
                args.output.write_text(text)
            else:
                sys.stdout.write(text)
            return 0
        if not args.lock.is_file():
            raise CatalogueError(f"--lock {args.lock}: no such file")
        if args.command == "build":
            print(f"sglang_catalogue: wrote {build(args.lock, args.output)}")
            return 0
        diff = check(args.lock, args.output)
        sys.stdout.writelines(diff)
        return 1 if diff else 0
    except CatalogueError as exc:
        print(f"sglang_catalogue: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
