# Copyright: gpuhost contributors
# Apache-2.0
"""The listen rules, once for every role and the CLI (docs/validation.md): which addresses are
loopback (a listener there needs no key and no firewall rule), what an API key may contain,
and the SGLang server's default port.

Roles reach them through the filters gpuhost.gpu.is_loopback and gpuhost.gpu.api_key_valid,
the constraints through the rule option `unless_loopback` (gpuhost_validate), the Python
through these names.
"""

from __future__ import annotations

import re

# The addresses that only this machine reaches. A name other than localhost is not resolved:
# what it resolves to can change, so it counts as an open listener.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# What an API key may contain: it is masked in logs by plain substring replacement and
# written to an EnvironmentFile, so no quotes, spaces or backslashes, and long enough that
# masking it cannot hide ordinary text.
API_KEY_PATTERN = r"[A-Za-z0-9._~+/=-]{16,}"
# The SGLang server's port when the inventory names none (sglang.launch_server's own default).
SERVER_PORT = 30000


def is_loopback(host) -> bool:
    return str(host).strip() in LOOPBACK_HOSTS


def api_key_valid(key) -> bool:
    return re.fullmatch(API_KEY_PATTERN, str(key or "")) is not None
