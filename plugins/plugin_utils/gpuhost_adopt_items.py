# Copyright: gpuhost contributors
# Apache-2.0
"""The items of an adopt proposal: one per package, flag or variable of a hand-started
server, each kept, dropped or changed with the product's reason (gpuhost_adopt.py makes the
proposal; docs/adopt.md). This file judges the packages against the locks and the
variables against role nccl's decision and the managed unit's env; the flags are judged in
gpuhost_adopt.py by the profile validator. Pure, controller-only (plugin_utils).
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import REDACTED
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl as nccl
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rules as nccl_rules

STATUSES = ("kept", "dropped", "changed")
# What the managed unit's env file sets itself (roles/sglang_server/templates/sglang-server.env.j2).
UNIT_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
HUB_CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE")
HUB_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def item(kind, name, value, status, reason, to=None):
    """One classified flag, variable or package; `to` is what replaces it (a value or the
    setting that now carries it)."""
    if status not in STATUSES:
        raise ValueError(f"adopt item {name!r}: status {status!r} is not one of {STATUSES}")
    out = {"kind": kind, "name": name, "value": value, "status": status, "reason": reason}
    if to is not None:
        out["to"] = to
    return out


def same(a, b):
    return str(a).lower() == str(b).lower()


# --------------------------------------------------------------------------------------
# versions and lane


def lane_for(versions, locks, current_lane):
    """(lane, item) for the server's sglang version: the lane whose lock pins it, else the
    inventory's lane (changed)."""
    have = (versions or {}).get("sglang")
    for lane, pins in sorted((locks or {}).items()):
        if have and pins.get("sglang") == have:
            return lane, item(
                "package", "sglang", have, "kept", f"lane {lane} pins sglang {have}", to=lane
            )
    pinned = (locks or {}).get(current_lane, {}).get("sglang", "unknown")
    known = ", ".join(f"{lane}: sglang {p.get('sglang')}" for lane, p in sorted(locks.items()))
    why = (
        f"no lock under locks/ pins sglang {have} ({known}); the managed venv is built from "
        f"lane {current_lane}'s lock (sglang {pinned})"
        if have
        else f"the server's sglang version could not be read; lane {current_lane} (sglang {pinned})"
    )
    return current_lane, item("package", "sglang", have or "unknown", "changed", why, to=pinned)


def package_items(versions, lock):
    out = []
    for name, have in sorted((versions or {}).items()):
        if name == "sglang":
            continue
        want = (lock or {}).get(name)
        if want is None:
            out.append(item("package", name, have, "dropped", "the lock does not pin it"))
        elif want == have:
            out.append(item("package", name, have, "kept", "the lock pins the same version"))
        else:
            out.append(
                item("package", name, have, "changed", f"the lock pins {name} {want}", to=want)
            )
    return out


# --------------------------------------------------------------------------------------
# environment


def nccl_item(name, value, decision, version):
    """One NCCL_* variable against role nccl's decision for this host."""
    derived = decision["env"].get(name)
    reasons = [r for r in decision["reasons"] if r["variable"] == name]
    why = "; ".join(r["reason"] for r in reasons)
    current, other = nccl_rules.min_ctas_name(version)
    if derived is not None and same(derived, value):
        return item("env", name, value, "kept", f"role nccl sets it here: {why}", "nccl"), None
    if derived is not None:
        return item("env", name, value, "changed", f"role nccl: {why}", derived), None
    if name == other and current in decision["env"]:
        then = "; ".join(r["reason"] for r in decision["reasons"] if r["variable"] == current)
        return item(
            "env", name, value, "changed", f"{why}; role nccl sets {current} here: {then}",
            f"{current}={decision['env'][current]}",
        ), None  # fmt: skip
    try:
        trial = nccl.decide(decision["input"], {name: value})
    except nccl.NcclInputError as exc:
        return item("env", name, value, "dropped", str(exc)), None
    warning = next((o["warning"] for o in trial["overrides"] if o["variable"] == name), "")
    if why or warning:
        return item("env", name, value, "dropped", "; ".join(filter(None, [warning, why]))), None
    return item(
        "env", name, value, "kept", "no rule of role nccl sets it: kept as an override",
        "nccl_env_overrides",
    ), value  # fmt: skip


def env_item(name, value, chosen_env):
    """A variable other than NCCL_*: (item, value for sglang_server_extra_env or None)."""
    if name in HUB_TOKEN_ENV:
        return item(
            "env", name, value, "changed",
            "the managed server loads cached weights offline (HF_HUB_OFFLINE=1) and needs no "
            "token; the download does: model_cache_hf_token (Vault, or HF_TOKEN on the "
            "controller). Its value is not read from the host",
            "model_cache_hf_token",
        ), None  # fmt: skip
    if value == REDACTED:
        return item(
            "env", name, value, "dropped",
            "a secret: adopt does not read or carry it; if the server needs it, set it in "
            "sglang_server_extra_env from Vault",
        ), None  # fmt: skip
    if name in HUB_CACHE_ENV:
        return item(
            "env", name, value, "changed",
            "the unit reads the managed cache (model_cache_hf_home); ProtectHome=yes hides "
            "home directories from it. Moving the weights there without a download is "
            "planned (issue 31 item 2)",
            "model_cache_hf_home",
        ), None  # fmt: skip
    if name in UNIT_ENV:
        status = "kept" if same(UNIT_ENV[name], value) else "changed"
        return item("env", name, value, status, "the unit's env file sets it", UNIT_ENV[name]), None
    if name == "CUDA_HOME":
        return item(
            "env", name, value, "kept", "set through sglang_server_cuda_home",
            "sglang_server_cuda_home",
        ), None  # fmt: skip
    if name in chosen_env and same(chosen_env[name], value):
        return item("env", name, value, "kept", "the profile sets the same"), None
    return item(
        "env", name, value, "kept", "kept in sglang_server_extra_env", "sglang_server_extra_env"
    ), value
