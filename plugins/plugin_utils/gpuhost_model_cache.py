# Copyright: gpuhost contributors
# Apache-2.0
"""Pure decisions behind role model_cache: the disk check, the download unit, its progress.

The download runs as a transient systemd unit (systemd-run) owned by the host's systemd, so
it survives the control node's disconnect and a re-run finds it. Everything here is pure
(strings and numbers in, dicts out) and unit-tested in tests/test_model_cache_logic.py.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from datetime import UTC, datetime

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding

GIB = 1 << 30
MIB = 1 << 20

# What may be rendered into the unit's command line and environment: no whitespace, no
# systemd specifier (%) or variable ($) expansion, no shell metacharacters.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
_INCLUDE = re.compile(r"[A-Za-z0-9._*?/\[\]-]+")
_ENV_KEY = re.compile(r"[A-Z_][A-Z0-9_]*")
_ENV_VALUE = re.compile(r"[A-Za-z0-9._:/@+,=\[\]-]*")  # [ ]: an IPv6 host in a URL
_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
_PYTHON = re.compile(r"python(3(\.[0-9]+)?)?")
# Secrets never travel in the unit's environment (systemctl show prints it): the token is the
# unit's standard input (a root-owned file PID 1 opens), read by the wrapper TOKEN_WRAPPER.
_SECRET_KEY = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIALS?)$")
# Keys the unit sets itself or that would defeat it: where the token comes from, offline mode.
_TOKEN_KEYS = ("HF_TOKEN_PATH", "HUGGING_FACE_HUB_TOKEN")
_OFFLINE_KEYS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
# huggingface_hub's constants._is_true: what it reads as "on".
_HF_TRUE = {"1", "ON", "YES", "TRUE"}
# The wrapper (roles/model_cache/files/gpuhost-hf-download) that reads the token from standard
# input in a non-dumpable process and runs the CLI in-process.
TOKEN_WRAPPER = "gpuhost-hf-download"


def _fmt_gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def human(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def expected_size(size_gib: float, profile_gib: float) -> tuple[float, str]:
    """The download size in GiB and where it came from (the variable wins over the profile)."""
    if float(size_gib) < 0:
        raise ValueError(
            f"model_cache_expected_size_gib: got {size_gib}; allowed: 0 (take the profile's "
            "download_gib) or a size in GiB"
        )
    if float(size_gib) > 0:
        return float(size_gib), "model_cache_expected_size_gib"
    if float(profile_gib or 0) > 0:
        return float(profile_gib), "the serving profile's download_gib"
    return 0.0, "unknown"


def disk_finding(
    *,
    free_bytes: int,
    probe_path: str,
    hf_home: str,
    model: str,
    size_gib: float,
    size_source: str,
    margin_gib: float,
    partial_bytes: int = 0,
    kept_bytes: int = 0,
    linked_bytes: int = 0,
) -> dict:
    """A finding (docs/facts.md) for the model's download against the cache's filesystem.

    Needed: the download size less what an interrupted download of this revision already
    left, plus the margin. Other revisions (`kept_bytes`, the one serving while a new one
    downloads beside it) already take their space out of the free bytes and stay: they are
    named, never credited. A size that is not known checks the margin only, and says so.
    `linked_bytes`: what adopting a user's hub cache (model_cache_adopt_from) hard links or
    finds already there: it takes no new space (what it copies does).
    """
    if float(margin_gib) < 0:
        raise ValueError(f"model_cache_free_margin_gib: got {margin_gib}; allowed: 0 or more GiB")
    if int(free_bytes) < 0:
        raise ValueError(f"free bytes on {probe_path}: got {free_bytes}; allowed: >= 0")
    size_bytes = float(size_gib) * GIB
    remaining = max(0.0, size_bytes - int(partial_bytes) - int(linked_bytes))
    needed = remaining + float(margin_gib) * GIB
    where = (
        hf_home if probe_path in ("", hf_home) else f"{hf_home} (on the filesystem of {probe_path})"
    )
    have = f"{_fmt_gib(free_bytes)} free for {where}"
    already = f", {human(partial_bytes)} already downloaded" if partial_bytes else ""
    if linked_bytes > 0:
        already += f", {human(linked_bytes)} hard linked from model_cache_adopt_from (no new space)"
    if kept_bytes > 0:
        already += f", {human(kept_bytes)} of other revisions kept beside it"
    size_text = (
        f"{model} needs ~{size_gib:g} GiB ({size_source}){already}"
        if size_bytes
        else f"{model}: download size unknown (set model_cache_expected_size_gib), margin only"
    )
    need_text = f"{_fmt_gib(needed)} needed with model_cache_free_margin_gib={margin_gib:g}"
    if int(free_bytes) < needed:
        return finding(
            "model_cache.disk",
            "fail",
            f"{have}; {size_text}: {need_text}",
            "Free space or grow that disk, or set model_cache_hf_home to a larger disk "
            "(model_cache_expected_size_gib / model_cache_free_margin_gib change the need).",
        )
    return finding(
        "model_cache.disk",
        "warn" if not size_bytes else "pass",
        f"{have}; {size_text}: {need_text}",
        "set model_cache_expected_size_gib to check the model's size" if not size_bytes else "",
    )


def hub_endpoint_error(name: str, value: str) -> str:
    """'' when `value` is a hub endpoint the token and the weights may travel to, else an error
    naming `name`. The rule: https:// to any host; http:// only to a loopback host (localhost,
    127.0.0.0/8, ::1: a mirror or proxy on the host itself, where nothing crosses a network
    in clear); nothing else (no other scheme, no user:password@, no query or fragment)."""
    allowed = (
        "allowed: https://HOST[:PORT][/PATH], or http:// only to a loopback host "
        "(localhost, 127.0.0.1, [::1]): the token and the weights must not cross a network "
        "in clear"
    )
    try:
        url = urllib.parse.urlsplit(str(value))
        host = url.hostname or ""
        url.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f"{name}: got {value!r}; {allowed}"
    if url.username or url.password or url.query or url.fragment or not host:
        return f"{name}: got {value!r}; {allowed}"
    if url.scheme == "https":
        return ""
    if url.scheme == "http":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if loopback:
            return ""
        return f"{name}: got {value!r} (http:// to {host}, not a loopback host); {allowed}"
    return f"{name}: got {value!r}; {allowed}"


def _env_error(key: str, value: str) -> str:
    """'' or the error for one key of model_cache_download_environment."""
    name = "model_cache_download_environment"
    if not _ENV_KEY.fullmatch(key) or _SECRET_KEY.search(key) or key in _TOKEN_KEYS:
        return (
            f"{name}: key {key!r}; allowed: upper-case names that are not secrets and do not "
            "name the token's source (the token goes through model_cache_hf_token)"
        )
    if not _ENV_VALUE.fullmatch(value):
        return (
            f"{name}: {key}={value!r}; allowed: values of letters, digits and . _ : / @ + , = - [ ]"
        )
    if key in _OFFLINE_KEYS:
        effect = (
            "the download cannot run offline"
            if value.strip().upper() in _HF_TRUE
            else "it has no effect on the download, which is online"
        )
        return (
            f"{name}: {key}={value!r}: {effect}; allowed: leave {key} unset (the server runs "
            "offline by itself, HF_HUB_OFFLINE=1 in its environment)"
        )
    if key == "HF_ENDPOINT":
        return hub_endpoint_error(f"{name}: HF_ENDPOINT", value)
    return ""


def validate_download(
    *, model: str, revision: str, include: list, env: dict, cli: str, hf_home: str
) -> list[str]:
    """Errors (each naming the variable, the value and what is allowed) for what the unit
    renders; [] when everything is safe to put on its command line and environment."""
    errors = []
    if not _REPO_ID.fullmatch(model or ""):
        errors.append(
            f"model_cache_model_id: got {model!r}; allowed: a Hugging Face repo id "
            "(org/name of letters, digits, '.', '_', '-')"
        )
    if not _REVISION.fullmatch(revision or ""):
        errors.append(
            f"model_cache_revision: got {revision!r}; allowed: a branch, tag or commit sha "
            "(letters, digits, '.', '_', '-', '/')"
        )
    for pattern in include or []:
        if not _INCLUDE.fullmatch(str(pattern)):
            errors.append(
                f"model_cache_include: got {pattern!r}; allowed: glob patterns of letters, "
                "digits and . _ * ? / [ ] -"
            )
    for name, value in (("model_cache_hf_cli", cli), ("model_cache_hf_home", hf_home)):
        if not _PATH.fullmatch(str(value or "")):
            errors.append(f"{name}: got {value!r}; allowed: an absolute path without spaces")
    for key, value in (env or {}).items():
        error = _env_error(str(key), str(value))
        if error:
            errors.append(error)
    return errors


def python_of(shebang: str, cli: str) -> list[str]:
    """The interpreter argv of the CLI's `#!` line (the wrapper runs the CLI in-process, so it
    must run under the CLI's own Python); ValueError naming model_cache_hf_cli otherwise."""
    line = (shebang or "").splitlines()[0] if (shebang or "").strip() else ""
    words = line[2:].split() if line.startswith("#!") else []
    prefix = ["/usr/bin/env"] if words[:1] == ["/usr/bin/env"] else []
    words = words[len(prefix) :]
    if (
        len(words) == 1
        and (prefix or _PATH.fullmatch(words[0]))
        and _PYTHON.fullmatch(words[0].rsplit("/", 1)[-1])
    ):
        return prefix + words
    # Only a #! line is shown: the first line of anything else is nobody's business.
    seen = repr(line[:80]) if line.startswith("#!") else "no #! line"
    raise ValueError(
        f"model_cache_hf_cli: {cli} starts with {seen}; allowed: a Python entry point "
        "(#!/path/to/python3 or #!/usr/bin/env python3, like huggingface_hub's hf): the hub "
        "token is handed to it in-process, never through an exec"
    )


def systemd_run_argv(
    *,
    unit: str,
    user: str,
    group: str,
    cli: str,
    model: str,
    revision: str,
    max_workers: int,
    include: list,
    env: dict,
    hf_home: str,
    timeout_s: int,
    python: list,
    wrapper: str,
    token_file: str = "",
) -> list[str]:
    """The systemd-run command line that starts the download as the service account.

    RemainAfterExit keeps the unit (and its result) after it ends, so a later run sees
    whether it succeeded; the role stops it once the completion marker is written.

    The token: `token_file` (root:root 0600, written by root just before) is the unit's
    standard input, opened by PID 1 as root; the service account cannot open it. Type=exec
    makes systemd-run return only once the process runs, with that descriptor open, so the
    role removes the file right after. `wrapper` (root-owned) reads it in a non-dumpable
    process and runs `cli` in-process under its own `python`: the token is in no argv, no
    unit environment, no file the account can read, no /proc entry of the downloader.
    Without a token standard input is /dev/null and the wrapper runs the CLI anonymously.
    """
    errors = validate_download(
        model=model, revision=revision, include=include, env=env, cli=cli, hf_home=hf_home
    )
    for name, value in (("the token file", token_file or "/"), ("the token wrapper", wrapper)):
        if not _PATH.fullmatch(str(value or "")):
            errors.append(f"{name}: got {value!r}; allowed: an absolute path without spaces")
    python = [str(word) for word in python or []]
    if not (
        python
        and _PATH.fullmatch(python[0])
        and _PYTHON.fullmatch(python[-1].rsplit("/", 1)[-1])
        and all(_PATH.fullmatch(w) or _PYTHON.fullmatch(w) for w in python)
    ):
        errors.append(f"the CLI's interpreter: got {python!r}; allowed: a Python interpreter")
    if errors:
        raise ValueError("; ".join(errors))
    argv = [
        "systemd-run",
        f"--unit={unit}",
        f"--description=gpuhost model download {model}@{revision}",
        f"--uid={user}",
        f"--gid={group}",
        "--property=Type=exec",
        "--property=RemainAfterExit=yes",
        f"--property=StandardInput={'file:' + token_file if token_file else 'null'}",
        "--property=StandardOutput=journal",
        "--property=StandardError=journal",
        f"--property=RuntimeMaxSec={int(timeout_s)}",
        "--property=NoNewPrivileges=yes",
        "--property=PrivateTmp=yes",
        "--property=ProtectSystem=strict",
        f"--property=ReadWritePaths={hf_home}",
        "--property=Nice=5",
        "--working-directory=/",
    ]
    argv += [f"--setenv={key}={value}" for key, value in sorted((env or {}).items())]
    argv += ["--", *python, "-I", wrapper, cli, "download", model, "--revision", revision]
    argv += ["--max-workers", str(int(max_workers))]
    argv += [f"--include={pattern}" for pattern in include or []]
    return argv


def parse_show(text: str) -> dict:
    """`systemctl show -p A,B UNIT` output -> {A: ..., B: ...}."""
    props = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def unit_state(props: dict) -> str:
    """absent | running | succeeded | failed, from systemctl show's properties."""
    load = props.get("LoadState", "")
    active = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    if load in ("", "not-found") or active == "inactive":
        return "absent"
    if active == "failed":
        return "failed"
    if active == "active" and sub == "exited":
        ok = props.get("Result", "success") == "success" and props.get("ExecMainStatus", "0") == "0"
        return "succeeded" if ok else "failed"
    return "running"


def start_action(state: str, marker: bool) -> str:
    """What the start step does: done (marker, nothing running), wait (a running download:
    this run follows it), finish (ended well, marker still to write), restart (it failed:
    start it again, it resumes), start (none yet)."""
    if state == "running":
        return "wait"
    if state == "succeeded":
        return "finish"
    if marker:
        return "done"
    if state == "failed":
        return "restart"
    return "start"


def parse_timestamp(text: str) -> str:
    """`systemctl show --timestamp=utc` ('Tue 2026-12-01 17:00:00 UTC') -> ISO 8601, or ''."""
    text = (text or "").strip()
    for fmt in ("%a %Y-%m-%d %H:%M:%S UTC", "%a %Y-%m-%d %H:%M:%S.%f UTC"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).isoformat(timespec="seconds")
        except ValueError:
            continue
    return ""


def progress_line(
    *, label: str, got: int, expected: int, rate: float, elapsed: float, incomplete: int
) -> str:
    """'acme/m@main: 1.2 GiB of ~4.0 GiB (30 %), 12.0 MiB/s, ETA 3m58s, 2 file(s) in progress'"""
    parts = [f"{label}: {human(got)}"]
    if expected:
        parts[0] += f" of ~{human(expected)} ({min(100, 100 * got // max(expected, 1))} %)"
    if rate > 0:
        parts.append(f"{human(rate)}/s")
        if expected and got < expected:
            parts.append(f"ETA {duration((expected - got) / rate)}")
    parts.append(f"{incomplete} file(s) in progress ({duration(elapsed)})")
    return ", ".join(parts)
