# Copyright: gpuhost contributors
# Apache-2.0
"""What may reach sglang-router's command line from the inventory: extra flags and workers.

The router unit renders its listen settings (host, port, Prometheus exporter), its policy and
its worker list from their own variables, and the launcher adds the keys; everything else
comes from sglang_router_extra_args. A name or value there, or a worker URL (systemd splits
$SGLANG_ROUTER_WORKER_URLS into one word per URL), that argparse would read as another option
would move the router's listener past its variables, its port rule and its keys. So:

- extra_args_problem(): each key a long flag, none of the ones that have their own variable,
  nor an abbreviation argparse would expand to one (allow_abbrev: `--hos` is `--host`); each
  value true/false/null, a string or a number, never a word that starts with '-' (a negative
  number aside).
- worker_url_problem(): an http(s) URL of plain characters: one word, no quote, space, `$`,
  backslash or '%'.

The reserved names are sglang-router 0.3.2's (router_args.py, RouterArgs.add_cli_args with
use_router_prefix=False, as launch_router parses them); tests/test_argv_injection.py checks
them against the real parser. Pure; gpuhost_validate calls these for the `argv:` key of
meta/constraints.yml, the router role's preflight through gpuhost.gpu.router_url_problems.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_catalogue import option_like

# Flags with their own variable (or set by the launcher): never in sglang_router_extra_args.
RESERVED = {
    "--host": "sglang_router_host",
    "--port": "sglang_router_port",
    "--policy": "sglang_router_policy",
    "--prometheus-host": "sglang_router_prometheus_host",
    "--prometheus-port": "sglang_router_prometheus_port",
    "--worker-urls": "sglang_router_worker_urls (or the workers group)",
    "--api-key": "sglang_router_worker_api_key (the launcher adds it from the keys file)",
    "--control-plane-api-keys": (
        "sglang_router_admin_api_key (the launcher adds it from the keys file)"
    ),
}
FLAG_NAME = re.compile(r"--[a-z0-9][a-z0-9-]*")
# http(s)://host[:port][/path]: a DNS name or IPv4 address, or an IPv6 literal in brackets.
WORKER_URL = re.compile(
    r"https?://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
    r"(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?"
)


def _reserved_for(flag):
    """The reserved flag `flag` names or abbreviates (argparse's prefix match), else None."""
    for name in RESERVED:
        if name.startswith(flag):
            return name
    return None


def extra_args_problem(extra):
    """None when sglang_router_extra_args is safe to render, else what is wrong with it."""
    if not isinstance(extra, dict):
        return "a mapping of sglang-router flags to values"
    problems = []
    for flag, value in extra.items():
        if not isinstance(flag, str) or not FLAG_NAME.fullmatch(flag):
            problems.append(
                f"key {flag!r}: a long flag of sglang-router such as --request-timeout-secs "
                "(lowercase letters, digits and '-', no '=')"
            )
            continue
        reserved = _reserved_for(flag)
        if reserved:
            how = "is" if reserved == flag else f"abbreviates {reserved}, which argparse reads as"
            problems.append(
                f"key {flag} {how} a listen, worker or key flag: set it through "
                f"{RESERVED[reserved]}, not here"
            )
            continue
        if value is True or value is False or value is None:
            continue
        if isinstance(value, (list, dict)):
            problems.append(
                f"{flag}: got a {type(value).__name__}; allowed: true (a switch), false or null "
                "(left out), a string or a number"
            )
        elif option_like(value):
            problems.append(
                f"{flag} {str(value)!r}: a value that starts with '-' would be read by "
                "sglang-router's argparse as another option; allowed: a value that does not "
                "start with '-' (or a negative number such as -1)"
            )
    return "; ".join(problems) or None


def worker_url_problem(url):
    """None when `url` is one safe word for --worker-urls, else what is allowed."""
    if isinstance(url, str) and WORKER_URL.fullmatch(url):
        return None
    return (
        "an http(s) URL of a worker, http(s)://HOST[:PORT][/PATH], HOST a DNS name, an IPv4 "
        "address or [an IPv6 address], the path of letters, digits and ._~/- only (it is one "
        "word of the router's command line: no space, quote, '$', '%' or backslash)"
    )


def check(kind, value):
    """The `argv:` constraint of meta/constraints.yml: None, or what is allowed."""
    if kind == "router_flags":
        return extra_args_problem(value)
    if kind == "worker_url":
        return worker_url_problem(value)
    raise ValueError(f"argv: unknown kind {kind!r} (allowed: router_flags, worker_url)")
