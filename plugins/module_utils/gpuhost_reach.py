# Copyright: gpuhost contributors
# Apache-2.0
"""Can this host reach another at ADDRESS:PORT? One TCP connect, read as a network answer:
a connection, or a refusal (RST: the host answered, nothing listens there yet), both mean the
path is open; a timeout (something drops the packets) or an unreachable network does not.
For a serving group's preflight (docs/multi-node.md): before the first start nothing listens
on rank 0's dist-init port, so a refusal is the expected pass there."""

from __future__ import annotations

import errno
import socket

OPEN = ("connected", "refused")


def reach(address: str, port: int, timeout: float) -> tuple[str, str]:
    """(outcome, detail): connected | refused | timeout | unreachable | error."""
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return "error", f"{address} does not resolve: {exc}"
    family, kind, proto, _, target = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(target)
        except TimeoutError:
            return "timeout", f"no answer within {timeout:g} s (dropped on the way)"
        except ConnectionRefusedError:
            return "refused", "refused (the host answered; nothing listens on the port yet)"
        except OSError as exc:
            if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return "unreachable", f"no route: {exc.strerror}"
            return "error", str(exc)
    return "connected", "connected"
