# Copyright: gpuhost contributors
# Apache-2.0
"""The SGLang server's keys file: one place for its format, its admin key and reading it.

`/etc/gpuhost/<service>.keys` (root, 0600) holds `api_key=<client key>` (may be empty) and
`admin_api_key=<admin key>`. The unit hands the file to gpuhost-sglang-launch as stdin
(`StandardInput=file:`), which passes both to SGLang without argv or environment (that
script parses the same format: it runs on the host without this module). The admin key is
generated on the host and never leaves it: modules that call admin routes read it there.
"""

from __future__ import annotations

import os
import secrets

KEY_NAMES = ("api_key", "admin_api_key")
HEADER = (
    "# Managed by gpuhost (role sglang_server). Root only: the unit hands this file to\n"
    "# gpuhost-sglang-launch as stdin. The admin key was generated on this host; delete this\n"
    "# file (or set sglang_server_rotate_admin_key for one run) and re-run gpuhost to rotate it.\n"
)


class KeysFileError(ValueError):
    """A keys file that cannot be read as name=value lines (the value is never shown)."""


def generate_admin_key() -> str:
    # 43 characters of [A-Za-z0-9_-]: what sglang_server_api_key's own rule allows.
    return secrets.token_urlsafe(32)


def parse_keys(text: str) -> dict:
    keys = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or name.strip() not in KEY_NAMES:
            raise KeysFileError(f"line {number}: expected api_key=... or admin_api_key=...")
        keys[name.strip()] = value.strip()
    return keys


def render_keys(api_key: str, admin_api_key: str) -> str:
    return f"{HEADER}api_key={api_key}\nadmin_api_key={admin_api_key}\n"


def read_keys_file(path: str) -> dict:
    """The keys of `path`; {} when there is no such file."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    try:
        return parse_keys(text)
    except KeysFileError as exc:
        raise KeysFileError(f"{path}: {exc}") from None


def plan_keys(current_text: str | None, api_key: str, rotate_admin_key: bool) -> tuple[str, bool]:
    """(content to write, whether the admin key is new): the admin key kept unless rotated,
    missing or unreadable."""
    admin = ""
    if current_text is not None and not rotate_admin_key:
        try:
            admin = parse_keys(current_text).get("admin_api_key", "")
        except KeysFileError:
            admin = ""
    fresh = not admin
    return render_keys(api_key, admin or generate_admin_key()), fresh


def write_private(path: str, content: str) -> None:
    """Write `content` to `path` atomically, mode 0600 (root's, when run as root)."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        if os.geteuid() == 0:
            os.chown(tmp, 0, 0)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
