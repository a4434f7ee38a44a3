"""The verify checks (plugins/module_utils/gpuhost_verify_checks.py) against the SGLang
STAND-IN (tests/standin/sglang_standin.py, a test double: no GPU or weights here), run as a
real HTTP server on 127.0.0.1, plus the answer matching and the parser smoke tests on
canned responses."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_verify_checks as probe

ROOT = Path(__file__).resolve().parents[1]


STANDIN = ROOT / "tests" / "standin" / "sglang_standin.py"
QUESTIONS = [
    {"prompt": "What is 17 + 25? Answer with the number only.", "expected": "42"},
    {"prompt": "What is 12 * 11? Answer with the number only.", "expected": "132"},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_standin(*extra: str):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDIN),
            "--port",
            str(port),
            "--served-model-name",
            "glm-5",
            "--standin-load-seconds",
            "0",
            "--standin-warmup-seconds",
            "0",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the stand-in did not open its port")


@pytest.fixture
def standin(request):
    proc, port = start_standin(*getattr(request, "param", ()))
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def params(port, **extra):
    return {
        "base_url": f"http://127.0.0.1:{port}",
        "served_model_name": "glm-5",
        "questions": QUESTIONS,
        "max_tokens": 64,
        "timeout": 10,
        **extra,
    }


def by_check(result):
    return {f["check"]: f for f in result["findings"]}


def test_healthy_standin_passes_every_check(standin):
    result = probe.run_checks(params(standin))
    checks = by_check(result)
    assert result["passed"], result["findings"]
    assert [c for c in checks] == [
        "verify.health",
        "verify.served_model",
        "verify.correctness",
        "verify.ttft",
    ]
    assert all(q["passed"] for q in result["questions"])
    assert result["ttft_ms"] is not None and result["ttft_ms"] > 0
    # The stand-in says it is one; the report names it so.
    assert result["server"]["standin"] is True
    assert "api_key" not in result["server"]


@pytest.mark.parametrize("standin", [("--standin-fault", "wrong-answers")], indirect=True)
def test_wrong_answers_fail_naming_question_expected_and_got(standin):
    result = probe.run_checks(params(standin))
    assert not result["passed"]
    failed = by_check(result)["verify.correctness"]
    assert failed["status"] == "fail"
    # The stand-in is off by one: 17 + 25 answers 43.
    assert "'What is 17 + 25? Answer with the number only.': expected '42'" in failed["message"]
    assert "43" in failed["message"]
    assert "2 of 2 wrong" in failed["message"]


def test_wrong_served_name_fails(standin):
    result = probe.run_checks(params(standin, served_model_name="not-served"))
    assert by_check(result)["verify.served_model"]["status"] == "fail"
    assert "glm-5" in by_check(result)["verify.served_model"]["message"]


def test_standin_refused_post_keeps_the_connection_usable():
    """The stand-in (a test double) reads a refused POST's body, so the next request on the
    same keep-alive connection is parsed as a request, not as the leftover JSON."""
    import http.client

    proc, port = start_standin("--api-key", "sk-verify-123")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"model": "glm-5", "messages": [{"role": "user", "content": "1+1"}]})
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        refused = conn.getresponse()
        assert refused.status == 401
        refused.read()
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_api_key_is_sent(tmp_path):
    proc, port = start_standin("--api-key", "sk-verify-123")
    try:
        without = probe.run_checks(params(port))
        with_key = probe.run_checks(params(port, api_key="sk-verify-123"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # /health needs no key (as in SGLang) but the questions do.
    assert by_check(without)["verify.health"]["status"] == "pass"
    assert by_check(without)["verify.served_model"]["status"] == "fail"
    assert with_key["passed"], with_key["findings"]
    assert "sk-verify-123" not in repr(with_key) + repr(without)


@pytest.mark.parametrize("standin", [("--standin-fault", "never-healthy")], indirect=True)
def test_unhealthy_server_stops_after_health(standin):
    result = probe.run_checks(params(standin))
    assert not result["passed"]
    assert [f["check"] for f in result["findings"]] == ["verify.health"]
    assert "503" in result["findings"][0]["message"]


def test_no_server_is_a_clear_failure():
    result = probe.run_checks(params(free_port()))
    assert result["findings"][0]["status"] == "fail"
    assert "not reachable" in result["findings"][0]["message"]


def test_ttft_limit(standin):
    result = probe.run_checks(params(standin, max_ttft_ms=0.001))
    assert by_check(result)["verify.ttft"]["status"] == "fail"


@pytest.mark.parametrize(
    ("text", "expected", "ok"),
    [
        ("42", "42", True),
        ("The answer is 42.", "42", True),
        ("17 + 25 = 42", "42", True),
        ("420", "42", False),
        ("4.2", "42", False),
        ("42.5", "42", False),
        ("It is 1,234 in total", "1234", True),
        ("-86", "86", True),
        ("", "42", False),
        ("The capital is Paris.", "paris", True),
        ("Parisian", "Paris", False),
    ],
)
def test_contains_expected(text, expected, ok):
    assert probe.contains_expected(text, expected) is ok


class Canned:
    """A client that answers one canned chat response (shapes from SGLang's OpenAI API)."""

    def __init__(self, message):
        self.message = message
        self.bodies = []

    def json(self, method, path, body=None):
        self.bodies.append(body)
        return {"choices": [{"message": self.message, "finish_reason": "stop"}]}


def test_reasoning_parser_smoke():
    ok = Canned({"content": "42", "reasoning_content": "6 times 7 is 42"})
    assert probe.check_reasoning(ok, "m", "glm45", 256)["status"] == "pass"
    assert ok.bodies[0]["chat_template_kwargs"] == {"enable_thinking": True}
    raw = Canned({"content": "<think>6 times 7</think>42", "reasoning_content": None})
    failed = probe.check_reasoning(raw, "m", "glm45", 256)
    assert failed["status"] == "fail" and "no reasoning_content" in failed["message"]


def test_tool_call_parser_smoke():
    call = {"function": {"name": "get_current_weather", "arguments": '{"city": "Paris"}'}}
    ok = Canned({"content": None, "tool_calls": [call]})
    assert probe.check_tool_call(ok, "m", "glm47", 256, {})["status"] == "pass"
    assert ok.bodies[0]["tools"][0]["function"]["name"] == "get_current_weather"
    unparsed = Canned({"content": "<tool_call>get_current_weather city=Paris</tool_call>"})
    failed = probe.check_tool_call(unparsed, "m", "glm47", 256, {})
    assert failed["status"] == "fail" and "no tool_calls" in failed["message"]
    bad_args = Canned(
        {
            "content": "",
            "tool_calls": [{"function": {"name": "get_current_weather", "arguments": "Paris"}}],
        }
    )
    assert probe.check_tool_call(bad_args, "m", "glm47", 256, {})["status"] == "fail"


def test_server_summary_drops_secrets():
    info = {"version": "0.5.10.post1", "api_key": "sk-x", "model_path": "m", "tp_size": 8}
    assert probe.server_summary(info) == {
        "version": "0.5.10.post1",
        "model_path": "m",
        "tp_size": 8,
    }


def test_settings_errors_name_the_option_value_and_allowed():
    assert probe.settings_errors({"served_model_name": "m", "questions": QUESTIONS}) == []
    (name,) = probe.settings_errors({"served_model_name": " ", "questions": QUESTIONS})
    assert name.startswith("served_model_name: got ' '") and "verify_served_model_name" in name
    (none,) = probe.settings_errors({"served_model_name": "m", "questions": []})
    assert none.startswith("questions: got none") and "verify_questions" in none
    (half,) = probe.settings_errors({"served_model_name": "m", "questions": [{"prompt": "q"}]})
    assert half.startswith("questions[0]: got {'prompt': 'q'}")


def run_verify_module(tmp_path, **args):
    """The module as Ansible runs it (its JSON arguments file), on this machine."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "plugins/modules/sglang_verify.py"), str(args_file)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    return json.loads(proc.stdout)


def test_module_says_no_server_without_its_unit_and_asks_nothing(tmp_path):
    # No unit: nothing is asked (the URL is unreachable) and empty settings are no error.
    out = run_verify_module(
        tmp_path,
        service_unit=str(tmp_path / "none.service"),
        base_url="http://127.0.0.1:9",
        served_model_name="",
        questions=[],
    )
    assert out == {"changed": False, "server_installed": False, "invocation": out["invocation"]}


def test_module_checks_the_settings_before_a_request_when_the_unit_is_there(tmp_path):
    unit = tmp_path / "sglang.service"
    unit.write_text("[Service]\n")
    out = run_verify_module(
        tmp_path, service_unit=str(unit), base_url="http://127.0.0.1:9", served_model_name=""
    )
    assert out["failed"] and out["msg"].startswith("served_model_name: got ''"), out
    assert "questions: got none" in out["msg"]
    asked = run_verify_module(
        tmp_path,
        service_unit=str(unit),
        base_url="http://127.0.0.1:9",
        served_model_name="m",
        questions=QUESTIONS,
        timeout=2,
    )
    assert asked["server_installed"] is True
    assert asked["verify"]["findings"][0]["status"] == "fail", asked
