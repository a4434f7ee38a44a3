"""Filters over what reaches sglang-router's command line (gpuhost_router_args.py).

urls | gpuhost.gpu.router_url_problems   -> ["<url>: allowed: ..."], [] when every URL is one
                                            safe word of the router's --worker-urls
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_plain import plain
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_router_args import (
    worker_url_problem,
)


def router_url_problems(urls) -> list[str]:
    out = []
    for url in plain(urls) or []:
        problem = worker_url_problem(url)
        if problem:
            out.append(f"{url!r}: allowed: {problem}")
    return out


class FilterModule:
    def filters(self):
        return {"router_url_problems": router_url_problems}
