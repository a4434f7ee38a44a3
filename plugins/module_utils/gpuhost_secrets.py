# Copyright: gpuhost contributors
# Apache-2.0
"""The project's one list of secret-name patterns, and redaction by name at any depth.

Plain Python with no Ansible import, so every part of the project can use the same list:
module_utils and plugins import it as collection code, and the CLI (src/gpuhost/redaction.py)
loads this file. A key whose name matches SECRET_NAME holds a secret; what redact() does
with its value:
- a string, anywhere in the data, becomes REDACTED;
- a bool or None stays (`api_key_set: true` names a key but holds none);
- a number stays, except where the caller says every value of a secret name is one
  (redact(..., scalars=True), for variables a user typed: `-e '{"password": 1234}'`);
- a dict or list is walked, so a secret nested in it is found too.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Credentials by name: tokens, secrets, passwords/passphrases, API and private keys,
# credentials, and `key` as a word of a name (`sglang_server_admin_key`, `key_file`), but
# not inside another word (`keyring`, `monkey`).
SECRET_NAME = re.compile(
    r"token|secret|passw|passphrase|api[_-]?key|private[_-]?key|credential"
    r"|(^|[_-])key($|[_-])",
    re.IGNORECASE,
)


def is_secret_name(name):
    return bool(SECRET_NAME.search(str(name)))


def _secret_value(value, scalars):
    if isinstance(value, str):
        return True
    if isinstance(value, bool) or value is None:
        return False
    return scalars and isinstance(value, (int, float))


def redact(value, scalars=False):
    """A copy of `value` with the values of secret-named keys replaced, at any depth."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if is_secret_name(key) and _secret_value(item, scalars):
                out[key] = REDACTED
            else:
                out[key] = redact(item, scalars)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(item, scalars) for item in value]
    return value
