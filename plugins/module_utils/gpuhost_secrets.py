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

# Credentials by name: tokens (not a tokenizer or a count of tokens: `tokenizer_path`,
# `max_total_tokens`), secrets, passwords/passphrases, API and private keys,
# credentials, and `key` as a word of a name (`sglang_server_admin_key`, `key_file`), but
# not inside another word (`keyring`, `monkey`).
SECRET_NAME = re.compile(
    r"token(?!iz|s(?:$|[_-]))|secret|passw|passphrase|api[_-]?key|private[_-]?key|credential"
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


# A value shorter than this is not looked for in free text: "true" or "1" would be
# replaced everywhere. Real credentials are longer.
KNOWN_VALUE_MIN = 6
# NAME=value (an env file's line, a shell or key=value argument) and "name": "value" (JSON
# in a task's printed result): the value of a secret name is replaced in free text.
_ASSIGNED = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>=)(?P<value>[^\s\"'&]+)")
_JSON_PAIR = re.compile(r'"(?P<name>[^"\\]{1,200})"(?P<sep>\s*:\s*)"(?P<value>(?:[^"\\]|\\.)*)"')


def secret_values(value, found=None):
    """The strings held by secret-named keys at any depth of `value` (a set), so the same
    strings can be removed from free text: stdout, a rendered file in a diff, a message."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, item in value.items():
            if is_secret_name(key) and isinstance(item, str) and item != REDACTED:
                if len(item) >= KNOWN_VALUE_MIN:
                    found.add(item)
            else:
                secret_values(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            secret_values(item, found)
    return found


def _hide_assigned(match):
    if not is_secret_name(match.group("name")) or match.group("value") == REDACTED:
        return match.group(0)
    return match.group("name") + match.group("sep") + REDACTED


def redact_text(text, known=()):
    """Free text with secrets removed: the `known` strings (secret_values) anywhere, and the
    value of every NAME=value or "name": "value" whose name is a secret's."""
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _JSON_PAIR.sub(
        lambda m: (
            m.group(0)
            if not is_secret_name(m.group("name"))
            else f'"{m.group("name")}"{m.group("sep")}"{REDACTED}"'
        ),
        text,
    )
    return _ASSIGNED.sub(_hide_assigned, text)


def redact_all(value, known=(), scalars=False):
    """redact() and then redact_text() on every string left: a run record's data, whose free
    text (a diff, stdout, a message) may quote a secret that a key names elsewhere."""
    value = redact(value, scalars)
    return _strings(value, known)


def _strings(value, known):
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {key: _strings(item, known) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings(item, known) for item in value]
    return value
