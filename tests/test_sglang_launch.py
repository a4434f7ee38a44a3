"""gpuhost-sglang-launch (roles/sglang_server/files): the keys come from stdin (the unit's
root-only keys file, StandardInput=file:), reach the server's argv in-process only, and are
never in /proc/PID/environ or /proc/PID/cmdline of the launcher or the server; the journal
copy is masked; SGLang's JSON responses (its /server_info carries both keys) are scrubbed by
an ASGI layer hooked into Starlette, a hook that refuses to start when it cannot apply."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "gpuhost-sglang-launch"
CLIENT = "client-key-0123456789abcdef"
ADMIN = "admin-key-fedcba9876543210ABC"


def load_launcher():
    loader = importlib.machinery.SourceFileLoader("gpuhost_sglang_launch", str(LAUNCHER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


launch = load_launcher()

# The "server": reports what it got and what /proc shows of itself and of its parent.
SERVER = textwrap.dedent(
    """
    import json, os, sys
    def proc(pid, name):
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().decode(errors="replace")
    print("server_args=ServerArgs(" + repr(sys.argv[1:]) + ")", flush=True)
    # To a file: the launcher masks the keys in everything the server prints.
    with open(os.environ["REPORT"], "w") as out:
        out.write(json.dumps({
        "argv": sys.argv[1:],
        "environ": proc("self", "environ"),
        "cmdline": proc("self", "cmdline"),
        "parent_environ": proc(os.getppid(), "environ"),
        "parent_cmdline": proc(os.getppid(), "cmdline"),
        "stdin": os.readlink("/proc/self/fd/0"),
        "starlette_hooked": any(
            type(f).__name__ == "_PatchOnImport" for f in sys.meta_path),
        }))
    """
)


def run_launcher(tmp_path, keys_text, env_extra=None):
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    keys = tmp_path / "keys"
    keys.write_text(keys_text)
    keys.chmod(0o600)
    report = tmp_path / "report.json"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "REPORT": str(report),
        **(env_extra or {}),
    }
    with keys.open("rb") as stdin:
        proc = subprocess.run(
            [sys.executable, str(LAUNCHER), str(server), "--port", "1"],
            stdin=stdin,
            capture_output=True,
            env=env,
            check=False,
            timeout=60,
        )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    return json.loads(report.read_text()), out


def test_keys_from_stdin_reach_argv_in_process_only(tmp_path):
    report, _ = run_launcher(tmp_path, f"# c\napi_key={CLIENT}\nadmin_api_key={ADMIN}\n")
    assert report["argv"] == ["--port", "1", f"--api-key={CLIENT}", f"--admin-api-key={ADMIN}"]
    for where in ("environ", "cmdline", "parent_environ", "parent_cmdline"):
        for key in (CLIENT, ADMIN):
            assert key not in report[where], where
    # The keys file is no longer open in the server: its stdin is /dev/null.
    assert report["stdin"] == "/dev/null"
    assert report["starlette_hooked"] is True


def test_journal_copy_is_masked(tmp_path):
    _, out = run_launcher(tmp_path, f"api_key={CLIENT}\nadmin_api_key={ADMIN}\n")
    lines = [x for x in out.splitlines() if x.startswith("server_args=")]
    assert lines and CLIENT not in lines[0] and ADMIN not in lines[0]
    assert "'--api-key=***'" in lines[0] and "'--admin-api-key=***'" in lines[0]


def test_an_empty_client_key_passes_only_the_admin_key(tmp_path):
    report, _ = run_launcher(tmp_path, f"api_key=\nadmin_api_key={ADMIN}\n")
    assert report["argv"] == ["--port", "1", f"--admin-api-key={ADMIN}"]


def test_no_keys_execs_the_entry_point_directly(tmp_path):
    report, _ = run_launcher(tmp_path, "")
    assert report["argv"] == ["--port", "1"]
    assert report["starlette_hooked"] is False


def test_an_older_units_environment_key_is_still_used_and_warned_about(tmp_path):
    report, out = run_launcher(tmp_path, "", {"GPUHOST_SGLANG_API_KEY": CLIENT})
    assert report["argv"] == ["--port", "1", f"--api-key={CLIENT}"]
    assert "GPUHOST_SGLANG_API_KEY" in out and "older unit" in out


def test_a_bad_keys_line_is_refused_without_echoing_it(tmp_path):
    server = tmp_path / "server.py"
    server.write_text("print('started')\n")
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), str(server)],
        input=f"token={CLIENT}\n".encode(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    out = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 2 and "started" not in out
    assert "line 1" in out and CLIENT not in out


# --- the ASGI layer ---------------------------------------------------------------------------


def asgi_app(content_type, parts):
    async def app(scope, receive, send):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(sum(len(p) for p in parts)).encode()),
                ],
            }
        )
        for index, part in enumerate(parts):
            await send(
                {"type": "http.response.body", "body": part, "more_body": index < len(parts) - 1}
            )

    return app


def call(app):
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    asyncio.run(app({"type": "http", "path": "/server_info"}, receive, send))
    return sent


def test_scrub_replaces_each_key_in_a_json_body_and_fixes_the_length():
    info = json.dumps(
        {"api_key": CLIENT, "admin_api_key": ADMIN, "launch_command": f"--api-key {CLIENT}"}
    ).encode()
    middle = len(info) // 2  # a key may straddle two body messages
    app = launch.ScrubSecrets(
        asgi_app(b"application/json", [info[:middle], info[middle:]]),
        [CLIENT.encode(), ADMIN.encode()],
    )
    start, body = call(app)
    data = json.loads(body["body"])
    assert data == {
        "api_key": "<redacted>",
        "admin_api_key": "<redacted>",
        "launch_command": "--api-key <redacted>",
    }
    assert dict(start["headers"])[b"content-length"] == str(len(body["body"])).encode()


def test_scrub_leaves_event_streams_alone():
    parts = [b"data: one\n\n", b"data: two\n\n"]
    sent = call(launch.ScrubSecrets(asgi_app(b"text/event-stream", parts), [CLIENT.encode()]))
    assert [m.get("body") for m in sent[1:]] == parts


def test_the_starlette_hook_applies_on_import_and_wraps_every_app(tmp_path, monkeypatch):
    package = tmp_path / "fakestar"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "applications.py").write_text(
        "class Starlette:\n"
        "    def __init__(self, inner):\n"
        "        self.inner, self.middleware_stack = inner, None\n"
        "    def build_middleware_stack(self):\n"
        "        return self.inner\n"
        "    async def __call__(self, scope, receive, send):\n"
        "        if self.middleware_stack is None:\n"
        "            self.middleware_stack = self.build_middleware_stack()\n"
        "        await self.middleware_stack(scope, receive, send)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(launch, "STARLETTE_MODULE", "fakestar.applications")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    launch.install_scrub([ADMIN.encode()])
    from fakestar.applications import Starlette  # imported after the hook, as SGLang does

    body = json.dumps({"admin_api_key": ADMIN}).encode()
    _, sent = call(Starlette(asgi_app(b"application/json", [body])))
    assert json.loads(sent["body"]) == {"admin_api_key": "<redacted>"}


def test_a_starlette_without_the_hook_point_refuses_to_start():
    module = types.ModuleType("starlette.applications")
    module.Starlette = type("Starlette", (), {})
    with pytest.raises(RuntimeError, match="refusing to start"):
        launch.scrub_starlette(module, [ADMIN.encode()])


def test_a_key_that_starts_with_a_dash_reaches_argparse_as_the_value():
    """A generated admin key is token_urlsafe, which may start with `-`: as a word of its own
    argparse takes it for an option and the start fails with `expected one argument` (seen in
    molecule rolling_update; about 1 generated key in 64). One word, `--admin-api-key=KEY`,
    parses."""
    spec = importlib.util.spec_from_file_location(
        "sglang_standin", Path(__file__).parent / "standin" / "sglang_standin.py"
    )
    standin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standin)
    keys = {"api_key": "-client-key-0123456789", "admin_api_key": "-Zadmin_key-0123456789"}
    args, ignored = standin.parse_args(["--port", "1", *load_launcher().key_flags(keys)])
    assert (args.api_key, args.admin_api_key) == tuple(keys.values())
    assert not ignored
    with pytest.raises(SystemExit):
        standin.parse_args(["--admin-api-key", keys["admin_api_key"]])
