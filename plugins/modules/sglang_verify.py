#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_verify
short_description: Check that a running SGLang server is healthy and answers correctly
description:
  - Asks the server on the host, over its OpenAI-compatible HTTP API, for C(/health), the
    served name in C(/v1/models), a set of questions with known answers at temperature 0,
    the time to first token of a streamed answer and, when the parsers are named, a smoke
    test of the reasoning and tool-call parsers.
  - Reports every check as a finding (docs/facts.md) and does not fail on a failed check;
    role verify decides. It fails only on bad arguments.
  - Read only: never reports a change and runs the same in check mode.
options:
  base_url:
    description: Server URL as seen from the host.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: Bearer key when the server was started with C(--api-key).
    type: str
    default: ""
  served_model_name:
    description: Name the server must list in C(/v1/models) and answer to.
    type: str
    default: ""
  questions:
    description: Questions with known answers; an answer passes when its content contains
      the expected value as a whole value (C(42) is not found in C(420)).
    type: list
    elements: dict
    default: []
  max_tokens:
    description: Token budget of each answer.
    type: int
    default: 64
  chat_template_kwargs:
    description: Passed with the questions (e.g. C(enable_thinking=false) for short answers).
    type: dict
    default: {}
  max_ttft_ms:
    description: Fail when the time to first token is over this; 0 reports it only.
    type: float
    default: 0
  reasoning_parser:
    description: The server's C(--reasoning-parser); empty skips that smoke test.
    type: str
    default: ""
  tool_call_parser:
    description: The server's C(--tool-call-parser); empty skips that smoke test.
    type: str
    default: ""
  parser_max_tokens:
    description: Token budget of the parser smoke tests (thinking needs room).
    type: int
    default: 256
  timeout:
    description: Seconds one request may take.
    type: float
    default: 120
  service_unit:
    description: The server's systemd unit file. When given and absent, no server is
      installed here - nothing is asked, the settings are not checked and the result says
      C(server_installed=false). Empty asks the server whatever is installed.
    type: path
    default: ""
author:
  - gpuhost contributors
"""

EXAMPLES = r"""
- name: Check the server
  gpuhost.gpu.sglang_verify:
    served_model_name: glm-5
    questions:
      - {prompt: "What is 17 + 25? Answer with the number only.", expected: "42"}
  register: _verify
"""

RETURN = r"""
server_installed:
  description: False when I(service_unit) was given and is absent (nothing was asked).
  returned: always
  type: bool
verify:
  description: base_url, served_model_name, server (version etc.), questions (prompt,
    expected, got, passed), ttft_ms, findings, passed.
  returned: when server_installed
  type: dict
"""

import os  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import SERVER_PORT  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_verify_checks import (  # noqa: E402 - after the doc blocks
    run_checks,
    settings_errors,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "default": f"http://127.0.0.1:{SERVER_PORT}"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "served_model_name": {"type": "str", "default": ""},
            "questions": {"type": "list", "elements": "dict", "default": []},
            "max_tokens": {"type": "int", "default": 64},
            "chat_template_kwargs": {"type": "dict", "default": {}},
            "max_ttft_ms": {"type": "float", "default": 0},
            "reasoning_parser": {"type": "str", "default": ""},
            "tool_call_parser": {"type": "str", "default": ""},
            "parser_max_tokens": {"type": "int", "default": 256},
            "timeout": {"type": "float", "default": 120},
            "service_unit": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    # No unit, no server: said by the result, nothing asked (role verify's skip).
    if params["service_unit"] and not os.path.exists(params["service_unit"]):
        module.exit_json(changed=False, server_installed=False)
    errors = settings_errors(params)
    if errors:
        module.fail_json(msg="; ".join(errors))
    try:
        result = run_checks(params)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    first = result["findings"][0]
    # A check run before the first provision finds no server yet: that is what provision
    # would change, not a failed check.
    if module.check_mode and first["status"] == "fail" and "not reachable" in first["message"]:
        first["status"] = "warn"
        first["message"] += " (check mode: provision starts the server)"
        result["passed"] = True
    module.exit_json(changed=False, server_installed=True, verify=result)


if __name__ == "__main__":
    main()
