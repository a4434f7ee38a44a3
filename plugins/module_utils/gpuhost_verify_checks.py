# Copyright: gpuhost contributors
# Apache-2.0
"""Ask a running SGLang server whether it serves, and serves correctly (role verify).

It runs on the GPU host inside an Ansible module, where the server listens on loopback, and
asks through the collection's one SGLang client (gpuhost_sglang_api, on Ansible's open_url),
judging answers with its one answer check (contains_expected, the whole-value match). Every check
becomes a finding ({check, status, message, fix}, docs/facts.md) so `gpuhost check`, the
run record and the report read verification the same way they read preflight.

Nothing here returns what the server says about its own arguments beyond a few harmless
fields: SGLang's /server_info includes `api_key`.
"""

from __future__ import annotations

import json
import time

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import is_secret_name
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import (
    ApiError as ProbeError,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import (
    Client,
    chat_body,
    contains_expected,
    first_message,
)

PREFIX = "verify."
# Fields of /server_info worth a line in the report; never the whole object (api_key).
SERVER_INFO_KEEP = ("version", "model_path", "served_model_name", "tp_size", "standin")
_THINK_MARKUP = ("<think>", "</think>")
_TOOL_MARKUP = ("<tool_call>", "</tool_call>", "<|tool_call")

# The tool the tool-call smoke test offers; the question can only be answered by calling it.
SMOKE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
SMOKE_TOOL_PROMPT = "What is the weather in Paris right now? Use the get_current_weather tool."
SMOKE_REASONING_PROMPT = "Think step by step: what is 6 * 7?"


finding = prefixed(PREFIX)


def shorten(text, limit=160):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def server_summary(info):
    """The harmless part of /server_info; secrets never leave this function."""
    if not isinstance(info, dict):
        return {}
    return {k: info[k] for k in SERVER_INFO_KEEP if k in info and not is_secret_name(k)}


def check_health(client):
    try:
        status, _ = client.request("GET", "/health")
    except ProbeError as exc:
        return finding(
            "health",
            "fail",
            f"server not reachable at {client.scheme}://{client.host}:{client.port}: {exc}",
            "start the server (gpuhost provision); its journal says why: "
            "journalctl -u sglang-server",
        ), False
    if status == 200:
        return finding("health", "pass", "/health answered 200"), True
    return finding(
        "health",
        "fail",
        f"/health answered {status} (503: still loading, draining or the scheduler is stuck)",
        "wait for the start to finish (large models take minutes), then look at the journal",
    ), False


def check_models(client, served_model_name):
    try:
        data = client.json("GET", "/v1/models")
    except ProbeError as exc:
        return finding("served_model", "fail", str(exc), "check the API key and the server"), []
    names = [str(m.get("id")) for m in data.get("data") or [] if isinstance(m, dict)]
    if served_model_name in names:
        return finding("served_model", "pass", f"/v1/models lists {served_model_name!r}"), names
    return finding(
        "served_model",
        "fail",
        f"/v1/models lists {names or 'nothing'}, not {served_model_name!r}",
        "set the served name in the profile (served_model_name) or fix verify_served_model_name",
    ), names


def ask(client, model, question, max_tokens, template_kwargs):
    """One correctness question at temperature 0; the record of what came back."""
    prompt, expected = str(question["prompt"]), str(question["expected"])
    started = time.monotonic()
    record = {"prompt": prompt, "expected": expected, "got": "", "passed": False}
    try:
        response = client.json(
            "POST", "/v1/chat/completions", chat_body(model, prompt, max_tokens, template_kwargs)
        )
    except ProbeError as exc:
        record["error"] = str(exc)
        return record
    message, finish = first_message(response)
    record["got"] = str(message.get("content") or "")
    record["finish_reason"] = finish
    record["seconds"] = round(time.monotonic() - started, 3)
    record["passed"] = contains_expected(record["got"], expected)
    return record


def check_correctness(client, model, questions, max_tokens, template_kwargs):
    answers = [ask(client, model, q, max_tokens, template_kwargs) for q in questions]
    wrong = [a for a in answers if not a["passed"]]
    if not wrong:
        return finding(
            "correctness", "pass", f"{len(answers)} of {len(answers)} questions answered right"
        ), answers
    parts = []
    for a in wrong:
        got = a.get("error") or repr(shorten(a["got"]))
        hint = " (cut at max_tokens)" if a.get("finish_reason") == "length" else ""
        parts.append(f"{a['prompt']!r}: expected {a['expected']!r}, got {got}{hint}")
    return finding(
        "correctness",
        "fail",
        f"{len(wrong)} of {len(answers)} wrong: " + "; ".join(parts),
        "a server that answers wrong is broken even when healthy: check the kv-cache dtype, "
        "quantization and attention backend of the profile (docs/reference.md §2)",
    ), answers


def measure_ttft(client, model, prompt, max_tokens, template_kwargs, limit_ms):
    """Time to the first streamed token (content or reasoning), in ms."""
    body = chat_body(model, prompt, max_tokens, template_kwargs, stream=True)
    ttft = None
    try:
        for elapsed, event in client.stream("/v1/chat/completions", body):
            choices = event.get("choices") or []
            delta = (choices[0].get("delta") or {}) if choices else {}
            if ttft is None and (delta.get("content") or delta.get("reasoning_content")):
                ttft = elapsed * 1000.0
    except ProbeError as exc:
        return finding("ttft", "fail", f"streaming request failed: {exc}"), None
    if ttft is None:
        return finding("ttft", "fail", "the stream carried no token"), None
    ttft = round(ttft, 1)
    if limit_ms and ttft > limit_ms:
        return finding(
            "ttft",
            "fail",
            f"time to first token {ttft} ms, over the limit of {limit_ms} ms",
            "look at the server load and the prefill settings, or raise verify_max_ttft_ms",
        ), ttft
    return finding("ttft", "pass", f"time to first token {ttft} ms"), ttft


def check_reasoning(client, model, parser, max_tokens):
    """With a reasoning parser the thinking comes back as reasoning_content, not as markup."""
    body = chat_body(model, SMOKE_REASONING_PROMPT, max_tokens, {"enable_thinking": True})
    try:
        message, _ = first_message(client.json("POST", "/v1/chat/completions", body))
    except ProbeError as exc:
        return finding("reasoning_parser", "fail", f"request failed: {exc}")
    reasoning = str(message.get("reasoning_content") or "")
    content = str(message.get("content") or "")
    if reasoning and not any(m in content for m in _THINK_MARKUP):
        return finding(
            "reasoning_parser", "pass", f"{parser}: reasoning_content split from the answer"
        )
    why = "no reasoning_content" if not reasoning else "think markup left in content"
    return finding(
        "reasoning_parser",
        "fail",
        f"{parser}: {why}; content {shorten(content)!r}",
        "check --reasoning-parser against the model family (sglang docs: reasoning parsers)",
    )


def check_tool_call(client, model, parser, max_tokens, template_kwargs):
    """With a tool-call parser a tool call comes back as tool_calls with JSON arguments."""
    body = chat_body(
        model,
        SMOKE_TOOL_PROMPT,
        max_tokens,
        template_kwargs,
        tools=[SMOKE_TOOL],
        tool_choice="auto",
    )
    try:
        message, _ = first_message(client.json("POST", "/v1/chat/completions", body))
    except ProbeError as exc:
        return finding("tool_call_parser", "fail", f"request failed: {exc}")
    content = str(message.get("content") or "")
    calls = message.get("tool_calls") or []
    name = ""
    arguments_ok = False
    if calls and isinstance(calls[0], dict):
        function = calls[0].get("function") or {}
        name = str(function.get("name") or "")
        try:
            arguments_ok = isinstance(json.loads(function.get("arguments") or ""), dict)
        except (TypeError, ValueError):
            arguments_ok = False
    expected = SMOKE_TOOL["function"]["name"]
    if name == expected and arguments_ok and not any(m in content for m in _TOOL_MARKUP):
        return finding("tool_call_parser", "pass", f"{parser}: {expected} called, JSON arguments")
    if not calls:
        why = f"no tool_calls; content {shorten(content)!r}"
    else:
        why = f"tool call {name!r}, arguments JSON: {arguments_ok}"
    return finding(
        "tool_call_parser",
        "fail",
        f"{parser}: {why}",
        "check --tool-call-parser against the model family (sglang docs: tool parsers)",
    )


def run_checks(params):
    """All checks in order; later checks are skipped when the server is not there."""
    client = Client(params["base_url"], params.get("api_key") or "", params.get("timeout", 60))
    model = params["served_model_name"]
    kwargs = params.get("chat_template_kwargs") or {}
    result = {
        "base_url": params["base_url"],
        "served_model_name": model,
        "server": {},
        "questions": [],
        "ttft_ms": None,
        "findings": [],
    }
    health, healthy = check_health(client)
    result["findings"].append(health)
    if not healthy:
        result["passed"] = False
        return result
    try:
        result["server"] = server_summary(client.json("GET", "/server_info"))
    except ProbeError:
        result["server"] = {}  # only informative; older servers name it /get_server_info
    served, _ = check_models(client, model)
    correctness, answers = check_correctness(
        client, model, params["questions"], params.get("max_tokens", 64), kwargs
    )
    result["questions"] = answers
    ttft, ttft_ms = measure_ttft(
        client,
        model,
        params["questions"][0]["prompt"],
        params.get("max_tokens", 64),
        kwargs,
        params.get("max_ttft_ms") or 0,
    )
    result["ttft_ms"] = ttft_ms
    result["findings"] += [served, correctness, ttft]
    parser_tokens = params.get("parser_max_tokens", 256)
    if result["server"].get("standin") and (
        params.get("reasoning_parser") or params.get("tool_call_parser")
    ):
        # The stand-in (a test double, tests/standin/) implements no parser: say so plainly
        # instead of failing a check the real server would answer.
        result["findings"].append(
            finding("parsers", "warn", "parser smoke tests skipped: the server is the stand-in")
        )
        params = {**params, "reasoning_parser": "", "tool_call_parser": ""}
    if params.get("reasoning_parser"):
        result["findings"].append(
            check_reasoning(client, model, params["reasoning_parser"], parser_tokens)
        )
    if params.get("tool_call_parser"):
        result["findings"].append(
            check_tool_call(client, model, params["tool_call_parser"], parser_tokens, kwargs)
        )
    result["passed"] = all(f["status"] != "fail" for f in result["findings"])
    return result


def settings_errors(params):
    """What the checks need before a request is made: a served name and at least one
    question with a prompt and an expected value. One line per problem, naming the option,
    the value and what is allowed; empty when the settings are usable."""
    errors = []
    if not str(params.get("served_model_name") or "").strip():
        errors.append(
            f"served_model_name: got {params.get('served_model_name')!r}; allowed: the name "
            "the server serves (role verify: verify_served_model_name, from "
            "sglang_server_served_model_name or the profile's served_model_name)"
        )
    questions = params.get("questions") or []
    if not questions:
        errors.append(
            "questions: got none; allowed: at least one {prompt, expected} "
            "(role verify: verify_questions)"
        )
    for index, question in enumerate(questions):
        if (
            not str(question.get("prompt") or "").strip()
            or not str(question.get("expected") or "").strip()
        ):
            errors.append(
                f"questions[{index}]: got {question!r}; allowed: a non-empty prompt and expected"
            )
    return errors
