"""The project's one secret-name list and its recursive redaction
(plugins/module_utils/gpuhost_secrets.py), and the CLI's use of that same module."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gpuhost import record, redaction

SECRETS_FILE = (
    Path(__file__).resolve().parents[1] / "plugins" / "module_utils" / "gpuhost_secrets.py"
)


def test_the_cli_uses_the_plugins_list():
    spec = importlib.util.spec_from_file_location("secrets_under_test", SECRETS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert redaction.SECRET_NAME.pattern == module.SECRET_NAME.pattern
    assert Path(redaction.redact.__code__.co_filename).resolve() == SECRETS_FILE


@pytest.mark.parametrize(
    "name",
    [
        "hf_token",
        "HF_TOKEN",
        "GPUHOST_SGLANG_API_KEY",
        "sglang_server_api_key",
        "sglang_router_admin_key",
        "api-key",
        "password",
        "vault_passphrase",
        "client_secret",
        "private_key",
        "aws_credentials",
        "key",
        "ssh_key_file",
    ],
)
def test_secret_names(name):
    assert redaction.is_secret_name(name)


@pytest.mark.parametrize("name", ["model", "cuda_keyring_url", "monkey", "served_model_name"])
def test_plain_names(name):
    assert not redaction.is_secret_name(name)


def test_redaction_is_recursive():
    data = {
        "model_cache": {"hf_token": "hf_x", "repo": "org/m"},
        "routers": [{"url": "http://r", "admin_key": "sk-1"}],
        "gpuhost_sglang": {"api_key_set": True, "api_key": None},
        "bench": {"total_output_tokens": 1234},
    }
    assert redaction.redact(data) == {
        "model_cache": {"hf_token": "<redacted>", "repo": "org/m"},
        "routers": [{"url": "http://r", "admin_key": "<redacted>"}],
        "gpuhost_sglang": {"api_key_set": True, "api_key": None},
        "bench": {"total_output_tokens": 1234},
    }


def test_typed_variables_hide_every_secret_value_at_any_depth():
    typed = {"password": 1234, "outer": {"pin_passphrase": 42, "count": 3}}
    assert record.redact_vars(typed) == {
        "password": "<redacted>",
        "outer": {"pin_passphrase": "<redacted>", "count": 3},
    }
    argv = ["-e", '{"outer": {"hf_token": "deep"}}']
    assert record.redact_argv(argv)[1] == '{"outer": {"hf_token": "<redacted>"}}'


def test_the_secret_name_list_exists_once():
    """No other product code keeps its own secret-name pattern or redaction (issue 16)."""
    root = Path(__file__).resolve().parents[1]
    # A name pattern is an alternation of lower-case words: "token|secret|passw...".
    pattern = re.compile(r"re\.compile\([^)]*(token|secret|passw)[a-z_?\[\]-]*\|")
    copies = [
        str(p.relative_to(root))
        for d in ("plugins", "src")
        for p in (root / d).rglob("*.py")
        if p.name != "gpuhost_secrets.py" and pattern.search(p.read_text())
    ]
    assert copies == []
    redactors = [
        str(p.relative_to(root))
        for d in ("plugins", "src")
        for p in (root / d).rglob("*.py")
        if p.name not in ("gpuhost_secrets.py",)
        and re.search(r"^def redact\(", p.read_text(), re.M)
    ]
    assert redactors == [], "use gpuhost_secrets.redact"


def test_a_server_env_secret_is_redacted_in_data_and_free_text():
    from gpuhost.redaction import REDACTED, redact_all, redact_text, secret_values

    fact = {"gpuhost_sglang": {"env": {"WANDB_API_KEY": "wandb-0123456789", "TZ": "UTC"}}}
    known = secret_values(fact)
    assert known == {"wandb-0123456789"}
    assert redact_all(fact, known)["gpuhost_sglang"]["env"] == {
        "WANDB_API_KEY": REDACTED,
        "TZ": "UTC",
    }
    # A rendered env file in a diff, a printed result, a message quoting the value.
    diff = "+WANDB_API_KEY=wandb-0123456789\n+TZ=UTC\n"
    assert redact_text(diff) == f"+WANDB_API_KEY={REDACTED}\n+TZ=UTC\n"
    printed = 'ok: [h] => {"WANDB_API_KEY": "wandb-0123456789", "TZ": "UTC"}'
    assert redact_text(printed) == f'ok: [h] => {{"WANDB_API_KEY": "{REDACTED}", "TZ": "UTC"}}'
    assert redact_text("export said wandb-0123456789", known) == f"export said {REDACTED}"


def test_plain_text_secret_in_the_server_env_warns_naming_it():
    from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate

    env = {"WANDB_API_KEY": "v123", "TZ": "UTC", "HF_TOKEN": "{{ vault_hf }}"}
    lines = gpuhost_validate.plain_text_env_secrets(env, lambda value: False)
    assert len(lines) == 1
    assert lines[0].startswith("sglang_server_extra_env: WANDB_API_KEY is set as plain text")
    assert "Ansible Vault" in lines[0] and "0600" in lines[0]
