"""bench/rolling_update.py's client load: paced to a rate, or as fast as the answers come.

A loopback HTTP server in this process stands in for the router (it answers every chat
completion with the expected reply); nothing else is reached.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rolling_bench", REPO / "bench/rolling_update.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["rolling_bench"] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"choices": [{"message": {"content": bench.EXPECT}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def router(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(bench, "ROUTER", server.server_address)
    yield
    server.shutdown()
    server.server_close()


def run_load(seconds: float, **kwargs) -> bench.Load:
    load = bench.Load(concurrency=4, max_seconds=60, **kwargs).start()
    time.sleep(seconds)
    return load.finish()


def test_a_paced_load_keeps_to_its_rate(router):
    load = run_load(2.0, pace=20.0)
    assert load.failed == 0, load.errors
    # 20 per second for ~2 s; a load that ignored the pace would send hundreds.
    assert 30 <= load.sent <= 48, load.sent


def test_an_unpaced_load_sends_as_fast_as_the_answers_come(router):
    load = run_load(1.0)
    assert load.failed == 0, load.errors
    # No pace: more in 1 s than the paced test's 20 per second allow (~100 here when idle).
    assert load.sent > 30, load.sent


def test_the_bench_refuses_a_rate_outside_its_bounds(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["rolling_update.py", "--rate", "-1"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2
    assert "--rate -1.0: allowed are 0 (unpaced) to 10000" in capsys.readouterr().err
