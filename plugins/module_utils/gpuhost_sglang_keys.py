# Copyright: gpuhost contributors
# Apache-2.0
"""The SGLang server's keys file: one place for its format, its admin key and reading it.

`/etc/gpuhost/<service>.keys` (root, 0600) holds `api_key=<client key>` (may be empty) and
`admin_api_key=<admin key>`. The unit hands the file to gpuhost-sglang-launch as stdin
(`StandardInput=file:`), which passes both to SGLang without argv or environment (that
script parses the same format: it runs on the host without this module). The admin key is
generated on the host and never leaves it: modules that call admin routes read it there.

`inspect_file` and `kept` are the one comparison: module sglang_keys decides its change with
them, and module path_stats (the role's one read, tasks/preflight.yml) answers with them
whether sglang_keys would change anything, from a digest of the client key and without
returning a key, so a no-op run makes no call of sglang_keys (issue 29 item 6).
"""

from __future__ import annotations

import hashlib
import hmac
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


def api_key_digest(api_key: str) -> str:
    """sha256 hex of the client key: what the read compares (the controller computes the
    same with `sglang_server_api_key | hash('sha256')`)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def inspect_file(path: str) -> tuple[str | None, bool]:
    """(text, owner and mode as sglang_keys leaves them: 0600, root's when run as root) of the
    keys file; (None, False) when there is none. A link or a non-regular file is refused
    (KeysFileError): sglang_keys never writes through one."""
    if not os.path.lexists(path):
        return None, False
    if os.path.islink(path) or not os.path.isfile(path):
        raise KeysFileError(f"{path}: not a regular file; remove it and re-run")
    info = os.stat(path)
    meta_ok = info.st_mode & 0o7777 == 0o600 and (
        os.geteuid() != 0 or (info.st_uid, info.st_gid) == (0, 0)
    )
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(), meta_ok


def kept(current_text: str | None, meta_ok: bool, api_key_sha256: str) -> bool:
    """Whether sglang_keys, not rotating, leaves the file as it is (changed false): owner and
    mode right, and the text exactly what plan_keys renders from the client key whose digest
    is given and the admin key the file holds. True implies plan_keys' content equals the text
    (render_keys of the same two keys); for every key the profile accepts (no surrounding
    space) the converse holds too. Only the file's own client key is digested here."""
    if current_text is None or not meta_ok:
        return False
    try:
        keys = parse_keys(current_text)
    except KeysFileError:
        return False
    client, admin = keys.get("api_key", ""), keys.get("admin_api_key", "")
    return (
        bool(admin)
        and hmac.compare_digest(api_key_digest(client), api_key_sha256)
        and render_keys(client, admin) == current_text
    )


def look_kept(path: str, api_key_sha256: str) -> dict:
    """{path, kept}: module path_stats' answer for the keys file. A file sglang_keys refuses
    (a link, not a regular file) is not kept: that module then says why."""
    try:
        current, meta_ok = inspect_file(path)
    except KeysFileError:
        return {"path": path, "kept": False}
    return {"path": path, "kept": kept(current, meta_ok, api_key_sha256)}


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
