# Copyright: gpuhost contributors
# Apache-2.0
"""The router gpuhost runs, and what may reach its command line from the inventory.

IMPLEMENTATIONS is the one table of the two routers role sglang_router can run
(sglang_router_package): smg, the SGLang Model Gateway (default), and sglang-router 0.3.2,
its predecessor. Per package: the pinned version (locks/<package>-<version>.txt), the module
the launcher runs (`python -m <entry>`), the spelling of every flag gpuhost renders or the
launcher adds, and the listen and key flags that release has beyond those, which no setting
covers. The unit template and the launcher take all of it from here (filter
gpuhost.gpu.router_impl); tests/test_argv_injection.py checks each row against the real
parser of its wheel.

The router unit renders its listen settings (host, port, Prometheus exporter), its policy and
its worker list from their own variables, and the launcher adds the keys; everything else
comes from sglang_router_extra_args. A name or value there, or a worker URL (systemd splits
$SGLANG_ROUTER_WORKER_URLS into one word per URL), that argparse would read as another option
would move the router's listener past its variables, its port rule and its keys. So:

- extra_args_problem(): each key a long flag, none of the ones that have their own variable
  or open a listener or take a key (RESERVED, over both packages), nor an abbreviation
  argparse would expand to one (allow_abbrev: `--hos` is `--host`); each value
  true/false/null, a string or a number, never a word that starts with '-' (a negative
  number aside).
- worker_url_problem(): an http(s) URL of plain characters: one word, no quote, space, `$`,
  backslash or '%'.

Pure; gpuhost_validate calls these for the `argv:` key of meta/constraints.yml, the router
role's preflight through gpuhost.gpu.router_url_problems.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_catalogue import option_like

# Which setting each rendered flag carries (named in a refusal of sglang_router_extra_args).
SETTINGS = {
    "host": "sglang_router_host",
    "port": "sglang_router_port",
    "policy": "sglang_router_policy",
    "prometheus_host": "sglang_router_prometheus_host",
    "prometheus_port": "sglang_router_prometheus_port",
    "worker_urls": "sglang_router_worker_urls (or the workers group)",
    "api_key": "sglang_router_worker_api_key (the launcher adds it from the keys file)",
    "admin_keys": "sglang_router_admin_api_key (the launcher adds it from the keys file)",
}
# Both releases spell these alike (their router_args.py, RouterArgs.add_cli_args with
# use_router_prefix=False, as launch_router parses them); each row keeps its own copy so that
# a release that renames one changes one row.
_FLAGS = {
    "host": "--host",
    "port": "--port",
    "policy": "--policy",
    "prometheus_host": "--prometheus-host",
    "prometheus_port": "--prometheus-port",
    "worker_urls": "--worker-urls",
    "api_key": "--api-key",
    "admin_keys": "--control-plane-api-keys",
}
_NO_LISTENER = "opens a listener that no gpuhost setting or port rule covers; not supported"
IMPLEMENTATIONS = {
    # The SGLang Model Gateway (PyPI `smg`): sglang-router's successor (docs/router.md).
    "smg": {
        "version": "1.13.0",
        "entry": "smg.launch_router",
        "flags": dict(_FLAGS),
        "refused": {
            "--health-check-port": f"a second probe port: {_NO_LISTENER}",
            "--enable-mesh": f"the HA mesh server (0.0.0.0:39527 by default): {_NO_LISTENER}",
            "--mesh-host": f"the mesh server's address: {_NO_LISTENER}",
            "--mesh-port": f"the mesh server's port: {_NO_LISTENER}",
            "--mesh-advertise-host": f"the mesh server's address: {_NO_LISTENER}",
            "--mesh-peer-urls": f"mesh peers: {_NO_LISTENER}",
            "--rdma-listen-ip": f"the RDMA pixel lane's listener: {_NO_LISTENER}",
            "--tenant-api-key": (
                "a serving-path key in argv (/proc/PID/cmdline shows it); gpuhost passes keys "
                "only through the keys file: not supported"
            ),
        },
    },
    "sglang-router": {
        "version": "0.3.2",
        "entry": "sglang_router.launch_router",
        "flags": dict(_FLAGS),
        "refused": {},
    },
}
DEFAULT_PACKAGE = "smg"
# Flags with their own variable (or set by the launcher), or a listener/key no setting covers,
# in either package: never in sglang_router_extra_args.
RESERVED = {}
for _impl in IMPLEMENTATIONS.values():
    for _key, _flag in _impl["flags"].items():
        RESERVED.setdefault(_flag, SETTINGS[_key])
    for _flag, _why in _impl["refused"].items():
        RESERVED.setdefault(_flag, _why)


def _pep503(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_package(freeze_text):
    """The router package a router venv already holds, from its `name==version` lines (what
    role sglang_router reads with the venv's own Python), or "" when it holds neither."""
    names = {_pep503(line.split("==", 1)[0].strip()) for line in str(freeze_text).splitlines()}
    for package in IMPLEMENTATIONS:
        if _pep503(package) in names:
            return package
    return ""


def choose_package(setting, freeze_text=""):
    """The router to run: sglang_router_package when the inventory names one; else the one the
    host's router venv already runs (a router an earlier gpuhost installed is not swapped
    under its clients by a routine converge); else DEFAULT_PACKAGE (a new router host)."""
    if setting:
        return setting
    return installed_package(freeze_text) or DEFAULT_PACKAGE


def implementation(package, version=""):
    """One row of IMPLEMENTATIONS for the role: package, version (`version` when given, else
    the pinned one), entry, flags, and the lock's file name under locks/."""
    if package not in IMPLEMENTATIONS:
        allowed = ", ".join(IMPLEMENTATIONS)
        raise ValueError(f"sglang_router_package: got {package!r}; allowed: {allowed}")
    row = IMPLEMENTATIONS[package]
    version = str(version or row["version"])
    return {
        "package": package,
        "version": version,
        "entry": row["entry"],
        "flags": dict(row["flags"]),
        "lock": f"{package}-{version}.txt",
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
        return "a mapping of router flags (smg or sglang-router) to values"
    problems = []
    for flag, value in extra.items():
        if not isinstance(flag, str) or not FLAG_NAME.fullmatch(flag):
            problems.append(
                f"key {flag!r}: a long flag of the router such as --request-timeout-secs "
                "(lowercase letters, digits and '-', no '=')"
            )
            continue
        reserved = _reserved_for(flag)
        if reserved:
            how = "is" if reserved == flag else f"abbreviates {reserved}, which argparse reads as"
            why = RESERVED[reserved]
            fix = why if why.endswith("not supported") else f"set it through {why}, not here"
            problems.append(f"key {flag} {how} a listen, worker or key flag: {fix}")
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
                "the router's argparse as another option; allowed: a value that does not "
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
