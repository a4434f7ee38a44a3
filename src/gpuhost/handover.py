"""Secrets reach ansible-playbook without being written anywhere: not in the run record, not
in ansible-runner's private data dir, not for a moment.

ansible-runner writes the environment it starts ansible-playbook with into the `command`
artifact before the process starts, and a dict of extra vars would go onto the command line
or into env/extravars. A SIGKILL leaves whatever was written, so nothing secret may be. So:

- ansible-runner's environment keeps no variable with a secret's name (HF_TOKEN,
  GPUHOST_SGLANG_API_KEY, GPUHOST_PROXMOX_TOKEN_SECRET ...: redaction.is_secret_name), and
  the -e values are not handed to it;
- the `ansible-playbook` it starts is a shim (runner/bin/ansible-playbook, first on PATH,
  holding no secret) that runs `python -m gpuhost.handover`: it fetches those variables and
  the -e values from this process over an abstract Unix socket (no file; one connection, from
  a process of the same user), puts the variables into its environment and runs the real
  ansible-playbook script in the same process (runpy) with the -e values added to sys.argv
  only: the kernel's copy of the command line (ps, /proc/<pid>/cmdline) is the one exec
  gave, without them. (A `-e @/dev/fd/N` pipe does not work: Ansible wants a regular file.)

ansible-playbook's own environment holds the secrets, as before: it is readable only by the
user who runs gpuhost (/proc/<pid>/environ is 0400), as this process's own environment is.
"""

from __future__ import annotations

import json
import os
import runpy
import secrets
import shutil
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuhost.errors import GpuhostError
from gpuhost.redaction import is_secret_name

SOCKET_ENV = "GPUHOST_HANDOVER_SOCKET"
PLAYBOOK_ENV = "GPUHOST_HANDOVER_PLAYBOOK"
PYTHON_ENV = "GPUHOST_HANDOVER_PYTHON"
_SHIM = """#!/bin/sh
# gpuhost's ansible-playbook shim (src/gpuhost/handover.py); it holds no secret.
exec "$GPUHOST_HANDOVER_PYTHON" -m gpuhost.handover "$@"
"""


def secret_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` that travel through the handover, never through a file."""
    return {key: value for key, value in env.items() if is_secret_name(key)}


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


@contextmanager
def serving(
    bin_dir: Path, env: dict[str, str], extra_vars: dict[str, object]
) -> Iterator[dict[str, str]]:
    """Serve `env`'s secret variables and `extra_vars` to one shim for the block. Yields
    what the environment ansible-runner gets must hold instead: the shim first on PATH,
    the socket's name, the real ansible-playbook and the Python that runs the shim."""
    real = shutil.which("ansible-playbook", path=env.get("PATH"))
    if real is None:
        raise GpuhostError("ansible-playbook not found on PATH; install ansible-core")
    bin_dir.mkdir(mode=0o700, exist_ok=True)
    shim = bin_dir / "ansible-playbook"
    shim.write_text(_SHIM, encoding="utf-8")
    shim.chmod(0o700)
    payload = json.dumps({"env": secret_env(env), "extra_vars": extra_vars}).encode()
    name = f"gpuhost-{os.getpid()}-{secrets.token_hex(16)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # abstract: no file, gone with the socket
    listener.listen(4)
    listener.settimeout(0.5)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                if _peer_uid(conn) != os.getuid():
                    continue  # another user's process: nothing for it
                conn.sendall(payload)
                return  # one ansible-playbook per run: later callers get nothing

    thread = threading.Thread(target=serve, name="gpuhost-handover", daemon=True)
    thread.start()
    try:
        yield {
            "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
            SOCKET_ENV: name,
            PLAYBOOK_ENV: real,
            PYTHON_ENV: sys.executable,
        }
    finally:
        done.set()
        listener.close()
        thread.join(timeout=2)


def _receive(name: str) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect("\0" + name)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks) or b"{}")


def main() -> None:
    """The shim: fetch the secrets, then run the real ansible-playbook (this interpreter's:
    project.ansible_bin_dir puts the one beside it first on PATH)."""
    name = os.environ.pop(SOCKET_ENV, "")
    real = os.environ.pop(PLAYBOOK_ENV, "")
    os.environ.pop(PYTHON_ENV, None)
    try:
        payload = _receive(name) if name and real else {}
    except (OSError, ValueError) as exc:
        payload = {"error": str(exc)}
    if "env" not in payload:
        why = payload.get("error", "not started by gpuhost")
        sys.stderr.write(f"gpuhost: cannot fetch the run's secrets ({why})\n")
        raise SystemExit(2)
    os.environ.update(payload["env"])
    args = sys.argv[1:]
    if payload.get("extra_vars"):
        # Just before the playbook (the last argument), where ansible-runner put
        # env/extravars: these -e values win over the -e @files, as they did.
        args = [*args[:-1], "-e", json.dumps(payload["extra_vars"]), *args[-1:]]
    sys.argv = [real, *args]
    runpy.run_path(real, run_name="__main__")


if __name__ == "__main__":
    main()
