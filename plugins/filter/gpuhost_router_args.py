"""Filters over the router gpuhost runs and its command line (gpuhost_router_args.py).

package | gpuhost.gpu.router_impl([version]) -> {package, version, entry, flags, lock}: the
                                            row of IMPLEMENTATIONS for sglang_router_package
setting | gpuhost.gpu.router_package(freeze) -> the package to run: the setting, else the one
                                            the router venv holds (freeze: its name==version
                                            lines), else smg
urls | gpuhost.gpu.router_url_problems   -> ["<url>: allowed: ..."], [] when every URL is one
                                            safe word of the router's --worker-urls
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_router_args import (
    choose_package,
    implementation,
    worker_url_problem,
)


def router_impl(package, version="") -> dict:
    try:
        return implementation(plain(package), plain(version) or "")
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def router_package(setting, freeze="") -> str:
    return choose_package(plain(setting) or "", plain(freeze) or "")


def router_url_problems(urls) -> list[str]:
    out = []
    for url in plain(urls) or []:
        problem = worker_url_problem(url)
        if problem:
            out.append(f"{url!r}: allowed: {problem}")
    return out


class FilterModule:
    def filters(self):
        return {
            "router_impl": router_impl,
            "router_package": router_package,
            "router_url_problems": router_url_problems,
        }
