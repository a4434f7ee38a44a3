# Copyright: gpuhost contributors
# Apache-2.0
"""Find SGLang servers gpuhost did not start, and read what they run with (read-only).

The logic of the `sglang_discover` module (issue 31 item 1; docs/adopt.md). Run as root on
the host, it reads /proc and the files a server's user left: its venv's pyvenv.cfg and
*.dist-info/METADATA, the hub cache its model came from. Root reads them and never runs
them (nothing from a user's venv is executed), and walks every path under a user's control
one component at a time without following a link a user could have made, and reads no file
over READ_CAP (gpuhost_user_files.py).

Secrets never leave the host: the value of a secret flag (--api-key, --admin-api-key, any
flag or variable whose name says it holds a secret) is reported as REDACTED, never read into
the result.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_python_env import normalize
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import (
    REDACTED,
    is_secret_name,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_user_files import (
    READ_CAP,
    NotRead,
    list_dir,
    read_file,
)

# The variables of a server's environment worth carrying over (the rest stays on the host).
ENV_PREFIXES = (
    "NCCL_",
    "CUDA_",
    "HF_",
    "HUGGING_FACE_",
    "SGLANG_",
    "TORCH_",
    "PYTORCH_",
    "OMP_",
    "TRANSFORMERS_",
    "SAFETENSORS_",
)
# The words issue 31 names for a secret variable, beside the project's one secret-name list.
_SECRET_WORDS = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
SECRET_FLAGS = ("--api-key", "--admin-api-key")
# The distributions whose versions decide the lock (read from METADATA, never imported).
PACKAGES = ("sglang", "flashinfer-python", "torch", "sgl-kernel", "sglang-kernel")
MODULE = "sglang.launch_server"
SCRIPT = "launch_server.py"
# Interpreter options that take a value in the next word (python -X opt, -W arg).
_OPTS_WITH_VALUE = ("-X", "-W", "-Q")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA = re.compile(r"[0-9a-f]{40}")


# --------------------------------------------------------------------------------------
# argv


def secret_name(name: str) -> bool:
    """A flag or variable whose value is a secret (reported as present, never as a value)."""
    return is_secret_name(name) or bool(_SECRET_WORDS.search(name)) or name in SECRET_FLAGS


def entry(argv: list[str]) -> int | None:
    """Index of the first server argument when argv runs sglang.launch_server (`-m
    sglang.launch_server` after the interpreter's options, or a launch_server.py script);
    None when it does not."""
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return i + 2 if argv[i + 1 : i + 2] == [MODULE] else None
        if word.startswith("-m") and len(word) > 2:
            return i + 1 if word[2:] == MODULE else None
        if word in ("-c", "-"):
            return None
        if word in _OPTS_WITH_VALUE:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        return i + 1 if os.path.basename(word) == SCRIPT else None
    return None


def parse_flags(args: list[str]) -> list[list[Any]]:
    """[[flag, value]] of a server's arguments, in order: a switch is True, one word a
    string, several words a list (SGLang takes no positional arguments, so every word after
    a flag up to the next `--` word is its value)."""
    out: list[list[Any]] = []
    for word in args:
        if word.startswith("--") and len(word) > 2:
            name, sep, value = word.partition("=")
            out.append([name, value if sep else True])
        elif out:
            held = out[-1][1]
            if held is True:
                out[-1][1] = word
            elif isinstance(held, list):
                held.append(word)
            else:
                out[-1][1] = [held, word]
        else:
            out.append(["", word])
    return out


def redact_flags(flags: list[list[Any]]) -> list[list[Any]]:
    """The flags with the value of every secret flag replaced by REDACTED."""
    return [
        [name, REDACTED if secret_name(name.lstrip("-")) and value is not True else value]
        for name, value in flags
    ]


def redact_argv(argv: list[str], start: int) -> list[str]:
    """argv with the value of each secret flag replaced (`--api-key X`, `--api-key=X`)."""
    out, hide = [], False
    for i, word in enumerate(argv):
        if hide and not word.startswith("--"):
            out.append(REDACTED)
            hide = False
            continue
        hide = False
        name, sep, _ = word.partition("=")
        if i >= start and name.startswith("--") and secret_name(name.lstrip("-")):
            if sep:
                out.append(f"{name}={REDACTED}")
                continue
            hide = True
        out.append(word)
    return out


def flag_value(flags: list[list[Any]], *names: str) -> Any:
    """The last value given to any of names (argparse keeps the last), or None."""
    found = None
    for name, value in flags:
        if name in names:
            found = value
    return found


def pick_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ENV_PREFIXES, each secret one as REDACTED."""
    return {
        name: (REDACTED if secret_name(name) else value)
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIXES)
    }


def parse_environ(raw: bytes) -> dict[str, str]:
    out = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and name:
            out[name] = value
    return out


# --------------------------------------------------------------------------------------
# the interpreter, its venv and the installed versions


def interpreter(argv0: str, cwd: str, environ: dict[str, str], exe: str) -> str:
    """The interpreter's path as the user named it: argv[0] (absolute, or relative to the
    working directory, or found on the process's PATH); else /proc/PID/exe's target."""
    if "/" in argv0:
        return os.path.normpath(os.path.join(cwd or "/", argv0))
    for folder in environ.get("PATH", "").split(":"):
        if folder and os.path.isabs(folder):
            candidate = os.path.join(folder, argv0)
            try:
                os.lstat(candidate)
            except OSError:
                continue
            return candidate
    return exe


def find_venv(python: str) -> str:
    """The directory holding pyvenv.cfg above the interpreter's path, or "" (none there, or a
    link on the way)."""
    folder = os.path.dirname(python)
    while True:
        try:
            read_file(os.path.join(folder, "pyvenv.cfg"), 64 << 10)
            return folder
        except NotRead:
            pass
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        folder = parent


def metadata_version(text: str) -> tuple[str, str]:
    """(Name, Version) from a METADATA file's headers."""
    name = version = ""
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.lower() == "name":
            name = value.strip()
        elif key.lower() == "version":
            version = value.strip()
    return name, version


def versions(venv: str) -> tuple[dict[str, str], list[str]]:
    """({distribution: version} of PACKAGES in the venv, problems), from METADATA files."""
    found: dict[str, str] = {}
    problems: list[str] = []
    lib = os.path.join(venv, "lib")
    try:
        pythons = [
            n for n, st in list_dir(lib) if n.startswith("python") and stat.S_ISDIR(st.st_mode)
        ]
    except (NotRead, OSError) as exc:
        return found, [str(exc)]
    wanted = {normalize(p) for p in PACKAGES}
    for py in pythons:
        site = os.path.join(lib, py, "site-packages")
        try:
            entries = list_dir(site)
        except (NotRead, OSError) as exc:
            problems.append(str(exc))
            continue
        for name, st in entries:
            if not name.endswith(".dist-info") or not stat.S_ISDIR(st.st_mode):
                continue
            if normalize(name[: -len(".dist-info")].split("-")[0]) not in wanted:
                continue
            try:
                text = read_file(os.path.join(site, name, "METADATA"), 256 << 10)
            except NotRead as exc:
                problems.append(str(exc))
                continue
            dist, version = metadata_version(text.decode("utf-8", "replace"))
            if normalize(dist) in wanted and version:
                found[normalize(dist)] = version
    return dict(sorted(found.items())), problems


# --------------------------------------------------------------------------------------
# the model and its hub cache


def hub_cache(environ: dict[str, str], cwd: str, home: str) -> str:
    """The hub cache the process would use (huggingface_hub's constants): HF_HUB_CACHE, else
    HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    if environ.get("HF_HUB_CACHE"):
        path = environ["HF_HUB_CACHE"]
    elif environ.get("HF_HOME"):
        path = os.path.join(environ["HF_HOME"], "hub")
    elif environ.get("XDG_CACHE_HOME"):
        path = os.path.join(environ["XDG_CACHE_HOME"], "huggingface", "hub")
    else:
        path = os.path.join(environ.get("HOME") or home, ".cache", "huggingface", "hub")
    return os.path.normpath(os.path.join(cwd or "/", os.path.expanduser(path)))


def read_hub_model(cache: str, model_id: str) -> dict[str, Any]:
    """What the hub cache holds of model_id: snapshot revisions, refs, blob count and bytes
    (sizes from lstat; nothing is hashed)."""
    repo = os.path.join(cache, "models--" + model_id.replace("/", "--"))
    out: dict[str, Any] = {
        "hub_cache": cache,
        "repo_dir": repo,
        "revisions": [],
        "refs": {},
        "blob_count": 0,
        "blob_bytes": 0,
        "incomplete": 0,
        "problems": [],
    }
    try:
        out["revisions"] = [
            n for n, st in list_dir(os.path.join(repo, "snapshots")) if stat.S_ISDIR(st.st_mode)
        ]
    except (NotRead, OSError) as exc:
        out["problems"].append(str(exc))
        return out
    try:
        for name, st in list_dir(os.path.join(repo, "refs")):
            if stat.S_ISREG(st.st_mode):
                ref = read_file(os.path.join(repo, "refs", name), 4096).decode().strip()
                if _SHA.fullmatch(ref):
                    out["refs"][name] = ref
    except (NotRead, OSError, UnicodeDecodeError) as exc:
        out["problems"].append(str(exc))
    try:
        for name, st in list_dir(os.path.join(repo, "blobs")):
            if not stat.S_ISREG(st.st_mode):
                continue
            if name.endswith(".incomplete"):
                out["incomplete"] += 1
                continue
            out["blob_count"] += 1
            out["blob_bytes"] += st.st_size
    except (NotRead, OSError) as exc:
        out["problems"].append(str(exc))
    return out


def model_of(flags: list[list[Any]], environ: dict[str, str], cwd: str, home: str) -> dict:
    """The model the server loads, and for a hub id what the hub cache holds of it."""
    model = flag_value(flags, "--model-path", "--model")
    revision = flag_value(flags, "--revision")
    if not isinstance(model, str) or not model:
        return {"id": "", "kind": "unknown", "revision": revision}
    if model.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(model):
        return {"id": model, "kind": "local", "revision": revision}
    cache = hub_cache(environ, cwd, home)
    return {"id": model, "kind": "hub", "revision": revision, **read_hub_model(cache, model)}


# --------------------------------------------------------------------------------------
# the process table


def managed(cgroup_text: str, service_name: str) -> bool:
    """Whether /proc/PID/cgroup puts the process in gpuhost's own unit."""
    unit = f"/{service_name}.service"
    return any(
        line.rpartition(":")[2].endswith(unit) or unit + "/" in line
        for line in cgroup_text.splitlines()
    )


def _proc(pid: int, name: str, proc: str) -> bytes:
    with open(os.path.join(proc, str(pid), name), "rb") as handle:
        return handle.read(READ_CAP)


def _user(uid: int) -> tuple[str, str]:
    try:
        entry_ = pwd.getpwuid(uid)
        return entry_.pw_name, entry_.pw_dir
    except KeyError:
        return str(uid), ""


def describe(pid: int, argv: list[str], start: int, proc: str = "/proc") -> dict[str, Any]:
    """Everything item 1 reports of one server process."""
    base = os.path.join(proc, str(pid))
    uid = os.stat(base).st_uid
    user, home = _user(uid)
    try:
        cwd = os.readlink(os.path.join(base, "cwd"))
    except OSError:
        cwd = ""
    try:
        exe = os.readlink(os.path.join(base, "exe"))
    except OSError:
        exe = ""
    try:
        environ = parse_environ(_proc(pid, "environ", proc))
    except OSError:
        environ = {}
    flags = parse_flags(argv[start:])
    python = interpreter(argv[0], cwd, environ, exe)
    # The path the user named first (a venv's bin/python is a link to the system's), then
    # the binary the kernel runs.
    venv = find_venv(python) or (find_venv(exe) if exe.startswith("/") else "")
    found, problems = (
        versions(venv)
        if venv
        else (
            {},
            [f"no pyvenv.cfg above {python} (not a venv, or a link on the way: not followed)"],
        )
    )
    return {
        "pid": pid,
        "user": user,
        "uid": uid,
        "cwd": cwd,
        "argv": redact_argv(argv, start),
        "flags": redact_flags(flags),
        "interpreter": python,
        "exe": exe,
        "venv": venv,
        "versions": found,
        "problems": problems,
        "env": pick_env(environ),
        "model": model_of(flags, environ, cwd, home),
    }


def discover(service_name: str, proc: str = "/proc") -> dict[str, Any]:
    """Every sglang.launch_server process not in gpuhost's unit, topmost only (a forked
    worker with its parent's argv is its parent's). Returns {servers, managed_pids}."""
    table: dict[int, tuple[int, list[str], int]] = {}
    managed_pids = []
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            argv = [a.decode("utf-8", "replace") for a in _proc(pid, "cmdline", proc).split(b"\0")]
            start = entry(argv[:-1] if argv and argv[-1] == "" else argv)
            if start is None:
                continue
            argv = argv[:-1] if argv[-1] == "" else argv
            if managed(_proc(pid, "cgroup", proc).decode("utf-8", "replace"), service_name):
                managed_pids.append(pid)
                continue
            ppid = int(_proc(pid, "stat", proc).decode().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        table[pid] = (ppid, argv, start)
    servers = []
    for pid, (ppid, argv, start) in sorted(table.items()):
        if ppid in table:
            continue
        try:
            servers.append(describe(pid, argv, start, proc))
        except OSError:
            continue  # it exited while being read
    return {"servers": servers, "managed_pids": sorted(managed_pids)}
