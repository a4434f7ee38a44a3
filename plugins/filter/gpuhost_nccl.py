"""Filters exposing the NCCL decision and sweep judgement (plugins/module_utils/gpuhost_nccl*.py).

gpuhost_gpu | gpuhost_nccl_input(gpuhost_host, nccl_version)  -> decision input
input | gpuhost_nccl_decide(overrides)               -> {env, disable_custom_all_reduce, ...}
decision | gpuhost_nccl_candidates                           -> autotune candidates
run | gpuhost_nccl_evaluate(decision, thresholds)            -> {status, diagnosis, ...}
runs | gpuhost_nccl_autotune(margin)                         -> {chosen, env, candidates, ...}
"""

from __future__ import annotations

import importlib.util
import os

from ansible.errors import AnsibleFilterError


def _load(name):
    # Custom module_utils are not importable from controller plugins outside a collection
    # (same approach as plugins/action/gpuhost_validate.py): load the pure module by path.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "module_utils", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"{name}_logic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nccl = _load("gpuhost_nccl")
verify = _load("gpuhost_nccl_verify")


def _plain(value):
    """Ansible hands filters lazy/templated containers; the pure code wants plain ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def nccl_input(gpu, host=None, nccl_version=None):
    return nccl.input_from_facts(_plain(gpu), _plain(host), _plain(nccl_version) or None)


def nccl_decide(inp, overrides=None):
    try:
        return nccl.decide(_plain(inp), _plain(overrides) or {})
    except nccl.NcclInputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nccl_candidates(decision):
    return nccl.autotune_candidates(_plain(decision))


def nccl_evaluate(run, decision, thresholds):
    return verify.evaluate(_plain(run), _plain(decision), _plain(thresholds))


def nccl_autotune(runs, margin=0.03):
    return verify.autotune_pick(_plain(runs), float(margin))


def nccl_apply_autotune(decision, pick, store):
    return nccl.apply_autotune(_plain(decision), _plain(pick), str(store))


def nccl_findings(decision, verified=None, skipped=""):
    return verify.findings(_plain(decision), _plain(verified) or None, str(skipped or ""))


class FilterModule:
    def filters(self):
        return {
            "gpuhost_nccl_input": nccl_input,
            "gpuhost_nccl_decide": nccl_decide,
            "gpuhost_nccl_candidates": nccl_candidates,
            "gpuhost_nccl_evaluate": nccl_evaluate,
            "gpuhost_nccl_autotune": nccl_autotune,
            "gpuhost_nccl_findings": nccl_findings,
            "gpuhost_nccl_apply_autotune": nccl_apply_autotune,
        }
