"""Filters for the sglang-router fleet: which URL the router knows each worker by.

The router role (the worker list it starts with) and the rolling update (the worker it
drains) must name a worker by the same URL, or a drain would miss it; both use these.

name | gpuhost.gpu.worker_url(hostvars[name])            -> "http://<address>:<port>"
names | gpuhost.gpu.worker_urls(hostvars)                -> one URL per worker, inventory order:
                                                            a host of rank >= 1 in a serving group
                                                            is no worker (its rank 0 serves)
name | gpuhost.gpu.is_worker(hostvars)                   -> false for rank >= 1 of a group
workers_json | gpuhost.gpu.router_worker_ids(url[, healthy_only]) -> ids the router holds for it
result | gpuhost.gpu.router_found_pairs(url)             -> [[router, id], ...] from a looped GET
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serving_group import (
    GroupError,
    of_host,
)


def _norm(url: str) -> str:
    return str(url).strip().rstrip("/")


def worker_url(name: str, host_vars) -> str:
    """An explicit `sglang_router_worker_url` wins; else ansible_host (or the inventory
    name) and the worker's `sglang_server_port` (a shared setting: group_vars/all defines it
    for every host, so hostvars always hold it when a project playbook runs)."""
    try:
        explicit = host_vars.get("sglang_router_worker_url")
        if explicit:
            return _norm(explicit)
        address = host_vars.get("ansible_host") or name
        port = host_vars.get("sglang_server_port")
    except AttributeError:
        raise AnsibleFilterError(f"gpuhost_worker_url: no host variables for {name!r}") from None
    if port in (None, ""):
        raise AnsibleFilterError(
            f"gpuhost_worker_url: {name!r} has neither sglang_router_worker_url nor "
            "sglang_server_port; allowed: set one of them (group_vars/all/sglang_server.yml "
            "defines sglang_server_port for every host a project playbook runs on)"
        )
    if ":" in str(address) and not str(address).startswith("["):
        address = f"[{address}]"  # an IPv6 literal needs brackets in a URL
    return f"http://{address}:{int(port)}"


def is_worker(name: str, hostvars) -> bool:
    """Whether the routers send requests to `name`: a host on its own or rank 0 of its serving
    group. A rank >= 1 serves only SGLang's dummy /health, /ping and /health_generate (SGLang
    0.5.10.post1, engine.py launch_dummy_health_check_server), never the API."""
    try:
        group = of_host(str(name), hostvars)
    except GroupError as err:
        raise AnsibleFilterError(str(err)) from None
    return not group or group["rank"] == 0


def worker_urls(names, hostvars) -> list[str]:
    return [worker_url(name, hostvars[name]) for name in names if is_worker(name, hostvars)]


def router_worker_ids(workers_json, url: str, healthy_only: bool = False) -> list[str]:
    """GET /workers answers {"workers": [{"id", "url", "is_healthy", ...}]}; a URL may be
    listed twice after a crashed update re-added it, so every matching id is returned."""
    if not isinstance(workers_json, dict) or not isinstance(workers_json.get("workers"), list):
        raise AnsibleFilterError(
            f"gpuhost_router_worker_ids: not a /workers answer: {str(workers_json)[:200]}"
        )
    want = _norm(url)
    return [
        str(w["id"])
        for w in workers_json["workers"]
        if isinstance(w, dict)
        and _norm(w.get("url", "")) == want
        and w.get("id")
        and (w.get("is_healthy") is True or not healthy_only)
    ]


def router_found_pairs(result, url: str) -> list[list[str]]:
    """One looped uri result (item = router host, json = its /workers) -> [[router, id]]."""
    if not isinstance(result, dict) or "item" not in result:
        raise AnsibleFilterError("gpuhost_router_found_pairs: expects one looped uri result")
    return [[str(result["item"]), i] for i in router_worker_ids(result.get("json"), url)]


class FilterModule:
    def filters(self):
        return {
            "worker_url": worker_url,
            "worker_urls": worker_urls,
            "is_worker": is_worker,
            "router_worker_ids": router_worker_ids,
            "router_found_pairs": router_found_pairs,
        }
