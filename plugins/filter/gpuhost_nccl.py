"""Filters exposing the NCCL decision and sweep judgement (plugins/plugin_utils/gpuhost_nccl*.py).

gpuhost_gpu | gpuhost.gpu.nccl_input(gpuhost_host, nccl_version)  -> decision input
input | gpuhost.gpu.nccl_decide(overrides)               -> {env, disable_custom_all_reduce, ...}
decision | gpuhost.gpu.nccl_candidates                           -> autotune candidates
run | gpuhost.gpu.nccl_evaluate(decision, thresholds)            -> {status, diagnosis, ...}
runs | gpuhost.gpu.nccl_autotune(margin)                         -> {chosen, env, candidates, ...}
decision | gpuhost.gpu.nccl_override_findings                    -> preflight.nccl_override items
decision | gpuhost.gpu.nccl_sweep_inputs(min_bytes, max_bytes)   -> hash of the sweep's inputs
inputs | gpuhost.gpu.nccl_sweep_plan(recorded, apps, active, drained, service) -> run/skip/refuse
group | gpuhost.gpu.nccl_group_findings(host, env, interfaces, ib_present) -> nccl.group.* items
apps | gpuhost.gpu.nccl_held_reasons(active, service)           -> why the GPUs are held ([])
group | gpuhost.gpu.nccl_across_plan(play_hosts, hostvars, check_mode) -> run/skip, all or none
result | gpuhost.gpu.nccl_across_evaluate(host, group, threshold, env, ib, interfaces) -> verdict
verdict | gpuhost.gpu.nccl_across_findings(skipped)             -> nccl.group.across item
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl as nccl
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_group as group
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rerun as rerun
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_verify as verify
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain


def nccl_input(gpu, host=None, nccl_version=None):
    return nccl.input_from_facts(plain(gpu), plain(host), plain(nccl_version) or None)


def nccl_decide(inp, overrides=None):
    try:
        return nccl.decide(plain(inp), plain(overrides) or {})
    except nccl.NcclInputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nccl_candidates(decision):
    return nccl.autotune_candidates(plain(decision))


def nccl_evaluate(run, decision, thresholds):
    return verify.evaluate(plain(run), plain(decision), plain(thresholds))


def nccl_autotune(runs, margin=0.03):
    return verify.autotune_pick(plain(runs), float(margin))


def nccl_apply_autotune(decision, pick, store):
    return nccl.apply_autotune(plain(decision), plain(pick), str(store))


def nccl_findings(decision, verified=None, skipped=""):
    return verify.findings(plain(decision), plain(verified) or None, str(skipped or ""))


def nccl_override_findings(decision):
    return verify.override_findings(plain(decision))


def nccl_sweep_inputs(decision, min_bytes, max_bytes):
    return rerun.inputs_hash(plain(decision), int(min_bytes), int(max_bytes))


def nccl_sweep_plan(inputs, recorded, apps, server_active, drained, service="sglang-server"):
    return rerun.plan(
        str(inputs),
        plain(recorded) or {},
        rerun.gpu_processes(str(plain(apps) or "")),
        bool(server_active),
        bool(drained),
        str(service),
    )


def _ifname(env):
    return (plain(env) or {}).get(group.rules.SOCKET_IFNAME)


def _address(serving, host):
    return (serving.get("addresses") or {}).get(host, "")


def nccl_group_findings(serving, host, env, interfaces=None, ib_present=None):
    serving = plain(serving) or {}
    return group.interface_findings(
        str(host),
        serving,
        _ifname(env),
        plain(interfaces),
        _address(serving, str(host)),
        plain(ib_present),
    )


def nccl_held_reasons(apps, server_active, service="sglang-server"):
    return rerun.held_reasons(str(plain(apps) or ""), bool(server_active), str(service))


def nccl_across_plan(serving, play_hosts, hostvars, check_mode=False):
    serving = plain(serving) or {}
    states = {}
    for member in serving.get("members") or []:
        try:
            states[member] = plain(hostvars[member].get("_nccl_across_state"))
        except KeyError:
            states[member] = None
    return group.across_plan(serving, plain(play_hosts) or [], states, bool(check_mode))


def nccl_across_evaluate(result, host, serving, threshold, env, ib_present, interfaces=None):
    serving = plain(serving) or {}
    ifname = _ifname(env)
    found = plain(interfaces) or {}
    chosen = [n for n in group.matching(ifname, sorted(found)) if not n.startswith("lo")]
    speeds = [found[n].get("speed_mbps") for n in chosen]
    speed = next((s for s in speeds if isinstance(s, int) and s > 0), None)
    return group.across_evaluate(
        str(host),
        serving,
        plain(result) or {},
        float(threshold),
        ", ".join(chosen) or ifname,
        plain(ib_present),
        speed,
    )


def nccl_across_findings(verdict, skipped=""):
    return group.across_findings(plain(verdict) or None, str(skipped or ""))


class FilterModule:
    def filters(self):
        return {
            "nccl_input": nccl_input,
            "nccl_decide": nccl_decide,
            "nccl_candidates": nccl_candidates,
            "nccl_evaluate": nccl_evaluate,
            "nccl_autotune": nccl_autotune,
            "nccl_findings": nccl_findings,
            "nccl_apply_autotune": nccl_apply_autotune,
            "nccl_override_findings": nccl_override_findings,
            "nccl_sweep_inputs": nccl_sweep_inputs,
            "nccl_sweep_plan": nccl_sweep_plan,
            "nccl_group_findings": nccl_group_findings,
            "nccl_held_reasons": nccl_held_reasons,
            "nccl_across_plan": nccl_across_plan,
            "nccl_across_evaluate": nccl_across_evaluate,
            "nccl_across_findings": nccl_across_findings,
        }
