"""Filters exposing the NCCL decision and sweep judgement (plugins/module_utils/gpuhost_nccl*.py).

gpuhost_gpu | gpuhost_nccl_input(gpuhost_host, nccl_version)  -> decision input
input | gpuhost_nccl_decide(overrides)               -> {env, disable_custom_all_reduce, ...}
decision | gpuhost_nccl_candidates                           -> autotune candidates
run | gpuhost_nccl_evaluate(decision, thresholds)            -> {status, diagnosis, ...}
runs | gpuhost_nccl_autotune(margin)                         -> {chosen, env, candidates, ...}
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleFilterError

# Custom module_utils are not importable from controller plugins outside a collection: put
# plugins/module_utils on sys.path (the gpuhost_ prefix keeps its module names unique).
_UTILS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "module_utils"))
if _UTILS not in sys.path:
    sys.path.append(_UTILS)

import gpuhost_nccl as nccl  # noqa: E402
import gpuhost_nccl_verify as verify  # noqa: E402
from gpuhost_plain import plain  # noqa: E402


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
