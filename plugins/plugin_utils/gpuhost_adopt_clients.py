# Copyright: gpuhost contributors
# Apache-2.0
"""`gpuhost adopt --apply`: the old listener and what its clients must change (issue 31 item 3;
docs/adopt.md), pure. The keep-the-port and key rules are the proposal's (gpuhost_adopt.listen)
and the listen rule's (module_utils/gpuhost_listen.py); this says them to the user after the
cutover."""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import (
    SERVER_PORT,
    is_loopback,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_adopt import SGLANG_HOST


def old_listen(found: dict) -> dict:
    """{host, port, api_key_set, health_url} of a discovered server, with SGLang's
    defaults; health_url: where the host itself reaches its /health (a wildcard listener on
    loopback)."""
    flags = dict((name, value) for name, value in found.get("flags") or [])
    host = str(flags.get("--host", SGLANG_HOST))
    port = int(flags.get("--port", SERVER_PORT))
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    reach = f"[{reach}]" if ":" in reach else reach
    return {
        "host": host,
        "port": port,
        "api_key_set": "--api-key" in flags,
        "health_url": f"http://{reach}:{port}/health",
    }


def clients(old: dict, new: dict) -> list[str]:
    """What the clients of the old server must change. old: {host, port, api_key_set} of the
    old listener (the proposal's listen decision); new: {host, port, api_key_set} the
    managed server was validated with."""
    said = []
    if str(old.get("port")) != str(new.get("port")):
        said.append(f"the port: {old.get('port')} -> {new.get('port')}")
    else:
        said.append(f"nothing about the port: {new.get('port')} is kept")
    if is_loopback(str(new.get("host"))) and not is_loopback(str(old.get("host"))):
        said.append(
            f"the address: the server listens on {new.get('host')} only; clients on other "
            "machines go through the router (docs/router.md)"
        )
    if new.get("api_key_set") and not old.get("api_key_set"):
        said.append(
            "the key: every request now needs 'Authorization: Bearer <sglang_server_api_key>' "
            "(the old listener took none)"
        )
    elif new.get("api_key_set"):
        said.append(
            "nothing about the key, when sglang_server_api_key is the key the old server had"
        )
    return said
