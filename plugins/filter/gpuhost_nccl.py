"""Filters exposing the NCCL decision and sweep judgement (plugins/plugin_utils/gpuhost_nccl*.py).

gpuhost_gpu | gpuhost.gpu.nccl_input(gpuhost_host, nccl_version)  -> decision input
input | gpuhost.gpu.nccl_decide(overrides)               -> {env, disable_custom_all_reduce, ...}
decision | gpuhost.gpu.nccl_candidates                           -> autotune candidates
run | gpuhost.gpu.nccl_evaluate(decision, thresholds)            -> {status, diagnosis, ...}
runs | gpuhost.gpu.nccl_autotune(margin)                         -> {chosen, env, candidates, ...}
decision | gpuhost.gpu.nccl_override_findings                    -> preflight.nccl_override items
decision | gpuhost.gpu.nccl_sweep_inputs(min_bytes, max_bytes)   -> hash of the sweep's inputs
inputs | gpuhost.gpu.nccl_sweep_plan(recorded, apps, active, drained, service) -> run/skip/refuse
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl as nccl
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
        }
