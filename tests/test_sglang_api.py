"""The one SGLang client and answer check (plugins/module_utils/gpuhost_sglang_api.py), and
the start gate's probe (plugins/modules/sglang_probe.py) judging answers with it.

The servers here are test doubles: a few lines of http.server that answer one fixed reply
(so the gate can be shown a "420"), and the SGLang stand-in of tests/standin/."""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_sglang_api as api
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_verify_checks as checks

ROOT = Path(__file__).resolve().parents[1]


def load_probe():
    path = ROOT / "plugins" / "modules" / "sglang_probe.py"
    spec = importlib.util.spec_from_file_location("gpuhost_test_sglang_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class OneReply(BaseHTTPRequestHandler):
    """Test double of an SGLang server that answers every question with `reply`."""

    reply = "42"
    key = ""
    seen: ClassVar[list] = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        return not self.key or self.headers.get("Authorization") == f"Bearer {self.key}"

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models" and self._authorized():
            self._send(200, {"data": [{"id": "glm-5"}]})
        else:
            self._send(401 if self.path.startswith("/v1/") else 404, {"error": "no"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if not self._authorized():
            self._send(401, {"error": "unauthorized"})
            return
        message = {"role": "assistant", "content": self.reply, "reasoning_content": None}
        self._send(200, {"choices": [{"message": message, "finish_reason": "stop"}]})


@pytest.fixture
def server(request):
    reply, key = getattr(request, "param", ("42", ""))
    handler = type("Handler", (OneReply,), {"reply": reply, "key": key, "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], handler
    httpd.shutdown()
    httpd.server_close()


def gate_params(port, **extra):
    return {
        "host": "127.0.0.1",
        "port": port,
        "served_model_name": "glm-5",
        "api_key": "",
        "correctness": True,
        "prompt": "What is 17 + 25? Reply with the number only.",
        "expect": "42",
        "max_tokens": 64,
        "request_timeout": 5,
        "node_rank": 0,
        **extra,
    }


@pytest.mark.parametrize("server", [("420", "")], indirect=True)
def test_gate_does_not_take_420_for_42(server):
    port, _ = server
    phase, detail, extra = load_probe().http_phase(gate_params(port))
    assert phase == "wrong", detail
    assert "expected '42' in the reply, got HTTP 200: '420'" in detail
    assert extra["answer"] == "420"


@pytest.mark.parametrize("server", [("The answer is 42.", "")], indirect=True)
def test_gate_takes_the_whole_value(server):
    port, handler = server
    phase, detail, _ = load_probe().http_phase(gate_params(port))
    assert phase == "correct", detail
    assert handler.seen[0]["temperature"] == 0 and handler.seen[0]["max_tokens"] == 64


@pytest.mark.parametrize("server", [("42", "sk-gate-0123456789")], indirect=True)
def test_gate_sends_the_key_and_stops_at_the_models_list_without_it(server):
    port, _ = server
    probe = load_probe()
    phase, detail, _ = probe.http_phase(gate_params(port))
    assert phase == "models_missing" and "answered 401" in detail
    phase, _, _ = probe.http_phase(gate_params(port, api_key="sk-gate-0123456789"))
    assert phase == "correct"


def test_gate_and_verify_share_one_answer_check():
    assert load_probe().contains_expected is api.contains_expected
    assert checks.contains_expected is api.contains_expected
    assert checks.Client is api.Client


def test_gate_on_a_closed_port():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OneReply)
    port = httpd.server_address[1]
    httpd.server_close()
    phase, _, _ = load_probe().http_phase(gate_params(port))
    assert phase == "port_closed"


@pytest.mark.parametrize("server", [("42", "sk-client-0123456789")], indirect=True)
def test_client_answers_and_errors(server):
    port, _ = server
    client = api.Client(api.base_url("0.0.0.0", port), "sk-client-0123456789", timeout=5)
    assert client.base_url == f"http://127.0.0.1:{port}"
    assert client.health() == 200
    assert client.models() == (200, ["glm-5"])
    message, finish = api.first_message(client.chat("glm-5", "17 + 25?", 16))
    assert api.reply_text(message) == "42" and finish == "stop"
    assert client.request("GET", "/nothing")[0] == 404
    with pytest.raises(api.ApiError, match="answered HTTP 404"):
        client.json("GET", "/nothing")
    without_key = api.Client(client.base_url, timeout=5)
    assert without_key.models() == (401, [])


def test_client_without_a_server_raises_api_error():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OneReply)
    port = httpd.server_address[1]
    httpd.server_close()
    with pytest.raises(api.ApiError, match="GET /health"):
        api.Client(api.base_url("127.0.0.1", port), timeout=2).health()


def test_base_url_and_bad_urls():
    assert api.base_url("::", 30000) == "http://127.0.0.1:30000"
    assert api.base_url("fd00::1", 30000) == "http://[fd00::1]:30000"
    assert api.base_url("10.0.0.5", "8000") == "http://10.0.0.5:8000"
    with pytest.raises(ValueError, match="base_url must be http"):
        api.Client("ftp://host:1")


@pytest.mark.parametrize(
    ("text", "expected", "ok"),
    [("420", "42", False), ("42", "42", True), ("forty-two: 42.", "42", True)],
)
def test_whole_value_match(text, expected, ok):
    assert api.contains_expected(text, expected) is ok
