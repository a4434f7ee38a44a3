"""The CLI's view of the project's one secret-name list (plugins/module_utils/
gpuhost_secrets.py): the same patterns and redact() the plugins use, and the Scrubber that
keeps secrets out of every file of a run record (runs/<ts>/).

It is loaded the way the CLI loads all collection code (gpuhost.plugin_code).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from gpuhost.plugin_code import module_utils

_secrets = module_utils("gpuhost_secrets")

REDACTED: str = _secrets.REDACTED
SECRET_NAME = _secrets.SECRET_NAME
is_secret_name = _secrets.is_secret_name
secret_values = _secrets.secret_values
redact_text = _secrets.redact_text
redact_all = _secrets.redact_all
redact = _secrets.redact


class Scrubber:
    """Secrets out of a run's record by name, as it is written and once more after the run.

    ansible-runner writes each event to job_events/ after gpuhost's event handler has seen
    it, and writes the handler's dict: watching() redacts it in place first, learning the
    values secret-named keys hold (a WANDB_API_KEY in sglang_server_extra_env, inside the
    resolved profile's fact) so the same strings are removed from free text too (stdout,
    a rendered file in a diff, a message). A value may be printed before a key names it,
    and the stdout artifact and the fact cache are written by ansible itself, so files()
    goes over the whole record again when the run has ended.
    """

    def __init__(self, known: set[str] | None = None) -> None:
        self.known: set[str] = set(known or ())

    def learn(self, data: object) -> None:
        self.known |= secret_values(data)

    def clean(self, data: object) -> object:
        self.learn(data)
        return redact_all(data, self.known)

    def watching(self, handler: Callable[[dict], bool]) -> Callable[[dict], bool]:
        def handle(event: dict) -> bool:
            clean = self.clean(event)
            event.clear()
            event.update(clean)  # the dict ansible-runner writes next
            return handler(event)

        return handle

    def files(self, root: Path) -> None:
        """Every file under `root` (a run dir), rewritten where it quotes a secret: JSON
        by structure and text, anything else as text."""
        paths = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
        texts = {}
        for path in paths:
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            with contextlib.suppress(ValueError):
                self.learn(json.loads(texts[path]))
        for path, text in texts.items():
            try:
                data = json.loads(text)
            except ValueError:
                new = redact_text(text, self.known)
            else:
                clean = redact_all(data, self.known)
                new = text if clean == data else json.dumps(clean)
            if new != text:
                _rewrite(path, new)


def _rewrite(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.scrub")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
