# Copyright: gpuhost contributors
# Apache-2.0
"""Pure decisions behind role model_cache: the disk check, the download unit, its progress.

The download runs as a transient systemd unit (systemd-run) owned by the host's systemd, so
it survives the control node's disconnect and a re-run finds it. Everything here is pure
(strings and numbers in, dicts out) and unit-tested in tests/test_model_cache_logic.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

GIB = 1 << 30
MIB = 1 << 20

# What may be rendered into the unit's command line and environment: no whitespace, no
# systemd specifier (%) or variable ($) expansion, no shell metacharacters.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
_INCLUDE = re.compile(r"[A-Za-z0-9._*?/\[\]-]+")
_ENV_KEY = re.compile(r"[A-Z_][A-Z0-9_]*")
_ENV_VALUE = re.compile(r"[A-Za-z0-9._:/@+,=-]*")
_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
# Secrets never travel in the unit's environment (systemctl show prints it): the token goes
# through HF_TOKEN_PATH, a 0600 file of the downloading account.
_SECRET_KEY = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIALS?)$")


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
) -> dict:
    """A finding (docs/facts.md) for the model's download against the cache's filesystem.

    Needed: the download size less what an interrupted download of this revision already
    left, plus the margin. Other revisions (`kept_bytes`, the one serving while a new one
    downloads beside it) already take their space out of the free bytes and stay: they are
    named, never credited. A size that is not known checks the margin only, and says so.
    """
    if float(margin_gib) < 0:
        raise ValueError(f"model_cache_free_margin_gib: got {margin_gib}; allowed: 0 or more GiB")
    if int(free_bytes) < 0:
        raise ValueError(f"free bytes on {probe_path}: got {free_bytes}; allowed: >= 0")
    size_bytes = float(size_gib) * GIB
    remaining = max(0.0, size_bytes - int(partial_bytes))
    needed = remaining + float(margin_gib) * GIB
    where = (
        hf_home if probe_path in ("", hf_home) else f"{hf_home} (on the filesystem of {probe_path})"
    )
    have = f"{_fmt_gib(free_bytes)} free for {where}"
    already = f", {human(partial_bytes)} already downloaded" if partial_bytes else ""
    if kept_bytes > 0:
        already += f", {human(kept_bytes)} of other revisions kept beside it"
    size_text = (
        f"{model} needs ~{size_gib:g} GiB ({size_source}){already}"
        if size_bytes
        else f"{model}: download size unknown (set model_cache_expected_size_gib), margin only"
    )
    need_text = f"{_fmt_gib(needed)} needed with model_cache_free_margin_gib={margin_gib:g}"
    if int(free_bytes) < needed:
        return {
            "check": "model_cache.disk",
            "status": "fail",
            "message": f"{have}; {size_text}: {need_text}",
            "fix": "Free space or grow that disk, or set model_cache_hf_home to a larger disk "
            "(model_cache_expected_size_gib / model_cache_free_margin_gib change the need).",
        }
    return {
        "check": "model_cache.disk",
        "status": "warn" if not size_bytes else "pass",
        "message": f"{have}; {size_text}: {need_text}",
        "fix": "set model_cache_expected_size_gib to check the model's size"
        if not size_bytes
        else "",
    }


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
        if not _ENV_KEY.fullmatch(str(key)) or _SECRET_KEY.search(str(key)):
            errors.append(
                f"model_cache_download_environment: key {key!r}; allowed: upper-case names "
                "that are not secrets (the token goes through model_cache_hf_token)"
            )
        elif not _ENV_VALUE.fullmatch(str(value)):
            errors.append(
                f"model_cache_download_environment: {key}={value!r}; allowed: values of "
                "letters, digits and . _ : / @ + , = -"
            )
    return errors


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
) -> list[str]:
    """The systemd-run command line that starts the download as the service account.

    RemainAfterExit keeps the unit (and its result) after it ends, so a later run sees
    whether it succeeded; the role stops it once the completion marker is written.
    """
    errors = validate_download(
        model=model, revision=revision, include=include, env=env, cli=cli, hf_home=hf_home
    )
    if errors:
        raise ValueError("; ".join(errors))
    argv = [
        "systemd-run",
        f"--unit={unit}",
        f"--description=gpuhost model download {model}@{revision}",
        f"--uid={user}",
        f"--gid={group}",
        "--property=RemainAfterExit=yes",
        f"--property=RuntimeMaxSec={int(timeout_s)}",
        "--property=NoNewPrivileges=yes",
        "--property=PrivateTmp=yes",
        "--property=ProtectSystem=strict",
        f"--property=ReadWritePaths={hf_home}",
        "--property=Nice=5",
        "--working-directory=/",
    ]
    argv += [f"--setenv={key}={value}" for key, value in sorted((env or {}).items())]
    argv += ["--", cli, "download", model, "--revision", revision]
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
