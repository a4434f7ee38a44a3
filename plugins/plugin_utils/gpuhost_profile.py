# Copyright: gpuhost contributors
# Apache-2.0
"""The SGLang serving profile: resolve it, validate it, render the server's command line.

Pure: dicts in, dicts out; no Ansible, no YAML, no I/O (its sibling gpuhost_catalogue.py
reads the catalogue the same way for everyone). The action plugin gpuhost_sglang_profile feeds
it the profile file, the inventory's overrides, the argument catalogue of the pinned sglang
version (data/sglang/catalogue-<version>.json) and the host facts;
tests/test_profile_validate.py feeds it dicts.

Three files: this one resolves a profile and validates it against the host (GPU count and
architecture, the nccl decision, the listening address); gpuhost_profile_flags.py checks
its flags against the catalogue; gpuhost_profile_render.py renders the command line, and
its functions are part of this module's interface.

Every rule comes from the pinned sglang wheels (their srt/server_args.py) or a cited public
report, and says so in its message, so a failed run explains itself.
"""

from __future__ import annotations

import re

# Controller-only (plugin_utils): no module under plugins/modules imports this file.
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import (
    LOOPBACK_HOSTS,
    SERVER_PORT,
    is_loopback,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_catalogue
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_car as nccl_car
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rules as nccl_rules
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import (
    gpuhost_profile_group as group_rules,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_flags import (
    SOURCE,
    check_flags,
)

# Part of this module's interface: the action plugin and the tests use them from here.
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_render import (  # noqa: F401
    control_characters,
    env_value,
    exec_start,
    render_args,
    systemd_quote,
)

# GLM-5 and DeepSeek-V3.2 use DeepSeek Sparse Attention (DSA, "nsa" in sglang's code).
DSA_MODEL_PATTERN = re.compile(r"glm-?5|deepseek-v3\.2", re.IGNORECASE)
NVFP4_QUANTIZATIONS = {"modelopt_fp4", "nvfp4", "petit_nvfp4", "modelopt_mixed"}
ALLREDUCE_FUSION_SMS = {90, 100, 103}


class ProfileError(Exception):
    """The profile file or overrides cannot be read as a profile at all."""


# --------------------------------------------------------------------------------------
# small helpers


def _sm(capability):
    """'12.0' -> 120; None when unknown."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(capability))
    return int(match.group(1)) * 10 + int(match.group(2)) if match else None


def gpu_summary(gpu):
    """(count or None, sorted SMs) from the gpuhost_gpu fact (docs/facts.md)."""
    if not isinstance(gpu, dict) or not gpu.get("driver", {}).get("loaded", False):
        return None, []
    count = gpu.get("count")
    sms = sorted(
        {s for s in (_sm(g.get("compute_capability")) for g in gpu.get("gpus") or []) if s}
    )
    if not isinstance(count, int) or isinstance(count, bool):
        return None, sms
    return count, sms


_finding = prefixed("sglang_server.")


# --------------------------------------------------------------------------------------
# the catalogue: gpuhost_catalogue.py (beside this file) is its one reader; its flags are
# checked by gpuhost_profile_flags.py

Catalogue = gpuhost_catalogue.Catalogue


def as_catalogue(data):
    """A gpuhost_catalogue.Catalogue from the parsed catalogue file (or one already made)."""
    if hasattr(data, "options") and hasattr(data, "resolve"):
        return data
    if not isinstance(data, dict) or not isinstance(data.get("flags"), dict):
        raise ProfileError("argument catalogue has no 'flags' mapping")
    return Catalogue({**data, "sglang_version": str(data.get("sglang_version", "unknown"))})


def _intlike(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value.strip()) is not None


# A model revision that is a commit (what --trust-remote-code needs; gpuhost_models_lock.SHA).
REVISION_SHA = re.compile(r"[0-9a-f]{40}")


# --------------------------------------------------------------------------------------
# resolve


def resolve(profile_doc, overrides):
    """Effective profile: the profile file's values, then the inventory's overrides.

    profile_doc: the parsed profiles/<name>.yml, or {} when no profile is selected.
    overrides: {model, served_model_name, revision, tp_size, flags, env}; empty string,
    0 or {} mean "take the profile's". A flag set to null or false in overrides removes the
    profile's flag of that name.
    """
    doc = dict(profile_doc or {})
    over = dict(overrides or {})
    for key in ("flags", "env"):
        for source, value in (("profile", doc.get(key)), ("override", over.get(key))):
            if value is not None and not isinstance(value, dict):
                raise ProfileError(
                    f"{source} {key}: expected a mapping, got {type(value).__name__}"
                )
    flags = dict(doc.get("flags") or {})
    for name, value in (over.get("flags") or {}).items():
        if value is None or value is False:
            flags.pop(name, None)
        else:
            flags[name] = value
    env = {str(k): v for k, v in (doc.get("env") or {}).items()}
    env.update({str(k): v for k, v in (over.get("env") or {}).items()})
    model = over.get("model") or doc.get("model") or ""
    return {
        "model": str(model),
        "served_model_name": str(
            over.get("served_model_name") or doc.get("served_model_name") or model
        ),
        "revision": str(over.get("revision") or doc.get("revision") or "main"),
        "tp_size": over.get("tp_size") or doc.get("tp_size") or 1,
        "dsa": doc.get("dsa"),
        "flags": flags,
        "env": env,
        "expected_baseline": doc.get("expected_baseline") or {},
        "download_gib": doc.get("download_gib") or 0,
        # Seconds from start to healthy on a warm cache (the gate's timeout: start_timeout).
        "start_seconds": over.get("start_seconds") or doc.get("start_seconds") or 0,
        "description": doc.get("description", ""),
        # The hosts the profile is sized for (gpuhost_profile_group.nodes_problem); None with
        # no profile, where the inventory's own TP is split over whatever group there is.
        "nodes": group_rules.profile_nodes(doc) if doc else None,
        # What the model-fit check reads (gpuhost_profile_fit.py); a model of the inventory's
        # own keeps the GPU requirements but not the profile's weights and KV sizes.
        "requires": doc.get("requires") or {},
        **(
            {"weights_gib": doc.get("weights_gib"), "kv_cache_min_gib": doc.get("kv_cache_min_gib")}
            if str(model) == str(doc.get("model") or "")
            else {}
        ),
    }


# --------------------------------------------------------------------------------------
# start timeout

# A first start compiles FlashInfer's JIT kernels and captures CUDA graphs anew: several times
# a warm start (docs/reference.md §3: GLM-5 7-8 min warm, 30 min or more allowed for a cold
# one). The gate waits this many times the expected start before it calls a start failed.
START_TIMEOUT_FACTOR = 4
# What the gate waits when neither the inventory nor the profile says anything.
START_TIMEOUT_DEFAULT = 2700


def start_timeout(start_seconds, override=0):
    """Seconds the health gate waits after a (re)start, and where the number comes from.

    override: sglang_server_start_timeout (> 0 wins); start_seconds: the profile's expected
    warm start (or sglang_server_start_seconds). Returns (seconds, source).
    """
    for name, value in (
        ("sglang_server_start_timeout", override),
        ("start_seconds", start_seconds),
    ):
        if not _intlike(value if value not in (None, "") else 0) or int(value or 0) < 0:
            raise ProfileError(f"{name}: got {value!r}; allowed: a whole number of seconds >= 0")
    if int(override or 0) > 0:
        return int(override), "sglang_server_start_timeout"
    if int(start_seconds or 0) > 0:
        seconds = START_TIMEOUT_FACTOR * int(start_seconds)
        return seconds, f"{START_TIMEOUT_FACTOR} x the expected start of {int(start_seconds)} s"
    return START_TIMEOUT_DEFAULT, "the default (no expected start known)"


# --------------------------------------------------------------------------------------
# validate


# Variables role nccl decides for every GPU host (nccl.env): NCCL's own, and the interface
# gloo binds to (torch.distributed's CPU group, which follows the same rule).
_NCCL_OWNED_PREFIXES = ("NCCL_",)
_NCCL_OWNED_NAMES = ("GLOO_SOCKET_IFNAME",)


def _owned_by_nccl(name):
    return name.startswith(_NCCL_OWNED_PREFIXES) or name in _NCCL_OWNED_NAMES


class _Report:
    """What validate() collects, concern by concern: message lines and findings."""

    def __init__(self):
        self.errors, self.warnings, self.notes, self.findings = [], [], [], []


def _check_rendered_text(effective, out):
    """The values written into the unit or its env file."""
    # Everything below is rendered into the unit or its env file: a newline there would be
    # a new directive (the inventory's own values are refused earlier, by gpuhost.gpu.validate).
    for key in ("model", "served_model_name", "revision", "flags", "env"):
        bad = control_characters(effective.get(key))
        if bad:
            out.errors.append(
                f"{key}: got {effective[key]!r}; allowed: text without control characters "
                f"(found {', '.join(bad)}): it is written into the systemd unit or its env file"
            )


def _check_remote_code(effective, get, out):
    """--trust-remote-code only from a commit sha."""
    # --trust-remote-code runs Python from the model repository inside the server: only from
    # a commit sha (a branch moves under the operator: whoever can push to it runs code on the
    # host). The revision checked is the one served, after the models lock pinned a branch.
    trust = get("--trust-remote-code")
    revision = str(effective.get("revision") or "")
    if (
        trust not in (None, False, "false", "False")
        and not REVISION_SHA.fullmatch(revision)
        and not str(effective.get("model", "")).startswith("/")
    ):
        message = (
            f"revision: got {revision!r} for {effective.get('model')} with --trust-remote-code; "
            "allowed: a 40-hex commit sha, because the server runs the repository's own Python "
            "code at that revision and a branch can move. Pin it in the profile's revision, "
            "in sglang_server_revision, or in the inventory's models lock "
            "(sglang_server_models_lock: the first run that reaches the hub pins the branch "
            "there), or drop --trust-remote-code"
        )
        out.errors.append(message)
        out.findings.append(_finding("trust_remote_code", "fail", message, "pin a commit sha"))
    elif trust not in (None, False, "false", "False"):
        out.findings.append(
            _finding("trust_remote_code", "pass", f"remote code only from commit {revision[:12]}")
        )


def _check_tokenizer_workers(get, out):
    """One tokenizer worker, or no key is checked."""
    # SGLang checks no key at all with more than one tokenizer worker (http_server.py: key
    # checking is only supported in single-tokenizer mode, 0.5.10.post1): the client key and
    # the admin key gpuhost always sets would both be ignored.
    workers = get("--tokenizer-worker-num")
    if workers is not None and _intlike(workers) and int(workers) > 1:
        message = (
            f"sglang_server_flags: --tokenizer-worker-num {workers}; allowed: 1 (or leave it "
            "out), because with more than one tokenizer worker sglang checks neither the "
            "client API key nor the admin key (its http_server.py supports keys in "
            "single-tokenizer mode only)"
        )
        out.errors.append(message)
        out.findings.append(_finding("tokenizer_workers", "fail", message, "remove the flag"))


def _check_inert_flags(effective, get, has, sms, out):
    """Flags that do nothing on this architecture."""
    # Flags that do nothing on this architecture or with these other flags: warn.
    inert = []
    attention = str(get("--attention-backend", ""))
    for flag in (
        "--nsa-prefill-backend",
        "--nsa-decode-backend",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
    ):
        if has(flag) and attention and attention not in ("nsa", "dsa"):
            inert.append(
                f"{flag} is only read with --attention-backend nsa/dsa; with {attention} it is "
                f"inert ({SOURCE}): remove it"
            )
    if has("--enable-flashinfer-allreduce-fusion") and sms and not set(sms) & ALLREDUCE_FUSION_SMS:
        inert.append(
            "--enable-flashinfer-allreduce-fusion only acts on SM90/SM100; inert on "
            f"SM{'/SM'.join(map(str, sms))} ({SOURCE}; deprecated by 0.5.20 for "
            "--flashinfer-allreduce-fusion-backend): remove it"
        )
    quantization = str(get("--quantization", ""))
    nvfp4 = quantization in NVFP4_QUANTIZATIONS or "nvfp4" in effective["model"].lower()
    if has("--fp8-gemm-backend") and nvfp4:
        inert.append(
            "--fp8-gemm-backend is likely inert for an NVFP4 checkpoint; the NVFP4 GEMM "
            f"backend is --fp4-gemm-backend ({SOURCE}): remove it or use --fp4-gemm-backend"
        )
    out.warnings += inert
    out.findings.append(
        _finding(
            "inert_flags",
            "warn",
            f"{len(inert)} flag(s) do nothing here: {inert[0]}",
            "remove them",
        )
        if inert
        else _finding("inert_flags", "pass", "no flag known to be inert on this host")
    )


def _check_kv_cache(effective, get, has, sms, policy, out):
    """The KV cache dtype of a DSA model."""
    # KV cache dtype for a DSA model on SM >= 10 (server_args.py; garbled on SM120: glm5.md).
    dsa = effective.get("dsa")
    if dsa is None:
        dsa = bool(DSA_MODEL_PATTERN.search(effective["model"]))
    kv = str(get("--kv-cache-dtype", "auto"))
    absent = " (the default when the flag is absent)"
    if dsa and sms and max(sms) >= 100 and kv == "auto":
        message = (
            f"--kv-cache-dtype auto{'' if has('--kv-cache-dtype') else absent} "
            f"with a DSA model ({effective['model']}) on SM{max(sms)} becomes fp8_e4m3 in sglang "
            "(_set_default_nsa_kv_cache_dtype), and FP8 KV gives garbled output on SM120 "
            f"({SOURCE})"
        )
        if policy.get("force_kv_cache_auto"):
            out.warnings.append(
                message + "; kept because sglang_server_force_kv_cache_auto is true"
            )
            out.findings.append(
                _finding("kv_cache_dtype", "warn", message, "set --kv-cache-dtype bf16")
            )
        else:
            out.errors.append(
                "sglang_server_flags: " + message + ": set '--kv-cache-dtype': bf16, or "
                "sglang_server_force_kv_cache_auto: true to keep auto"
            )
            out.findings.append(
                _finding("kv_cache_dtype", "fail", message, "set --kv-cache-dtype bf16")
            )
    elif dsa and sms and 120 in sms and kv.startswith("fp8"):
        message = (
            f"--kv-cache-dtype {kv} on SM120 with a DSA model: reported to give garbled "
            f"output ({SOURCE})"
        )
        out.warnings.append(message)
        out.findings.append(_finding("kv_cache_dtype", "warn", message, "use bf16"))
    else:
        out.findings.append(_finding("kv_cache_dtype", "pass", f"--kv-cache-dtype {kv}"))


def _check_parallelism(effective, get, count, no_gpu, nccl_overrides, out):
    """TP x PP x nodes against the GPUs."""
    # Tensor parallelism against the GPUs this host has.
    tp = effective["tp_size"]
    if not _intlike(tp) or int(tp) < 1:
        out.errors.append(f"sglang_server_tp_size: got {tp!r}; allowed: an integer >= 1")
        out.findings.append(_finding("tp_size", "fail", f"TP size {tp!r} is not an integer >= 1"))
    elif not no_gpu:
        tp = int(tp)
        pp = int(get("--pp-size", 1) or 1)
        nnodes = int(get("--nnodes", 1) or 1)
        total = tp * pp
        ifname = nccl_rules.socket_ifname(nccl_overrides)
        if nnodes > 1 and ifname == nccl_rules.SOCKET_IFNAME_ONE_NODE:
            out.errors.append(
                f"nccl_env_overrides.NCCL_SOCKET_IFNAME: got {ifname!r} (role nccl's one-node "
                f"default) with --nnodes {nnodes}; allowed: the interface the nodes reach "
                "each other on (e.g. eth0, or ^lo,docker), set in nccl_env_overrides, with "
                "the peers in sglang_server_firewall_cidrs: NCCL cannot span nodes over lo"
            )
            out.findings.append(
                _finding(
                    "nccl_socket_ifname",
                    "fail",
                    f"--nnodes {nnodes} with NCCL_SOCKET_IFNAME=lo",
                    "set nccl_env_overrides.NCCL_SOCKET_IFNAME",
                )
            )
        if total % nnodes:
            out.errors.append(
                f"sglang_server_tp_size: TP {tp} x PP {pp} = {total} GPUs do not split evenly "
                f"over --nnodes {nnodes}"
            )
            out.findings.append(
                _finding("tp_size", "fail", f"TP x PP {total} not divisible by {nnodes} nodes")
            )
        elif total // nnodes > count:
            # A profile's TP is sized to its model's memory: a smaller TP rarely fits.
            fit = (
                f"Select a profile sized for {count} GPU(s) with sglang_server_profile "
                f"(profiles/*.yml), or set sglang_server_tp_size <= {count} if the model fits"
            )
            out.errors.append(
                f"sglang_server_tp_size: got {tp}; this host has {count} GPU(s) and the profile "
                f"needs {total // nnodes} per node (TP {tp} x PP {pp} / {nnodes} node(s)); "
                f"allowed: TP x PP / nodes <= {count}. {fit}"
            )
            out.findings.append(
                _finding(
                    "tp_size",
                    "fail",
                    f"TP {tp} needs {total // nnodes} GPUs, host has {count}",
                    fit,
                )
            )
        elif total // nnodes < count:
            out.warnings.append(
                f"TP {tp} x PP {pp} uses {total // nnodes} of this host's {count} GPUs; "
                "the rest idle"
            )
            out.findings.append(
                _finding("tp_size", "warn", f"TP {tp} leaves {count - total // nnodes} GPU(s) idle")
            )
        else:
            out.findings.append(_finding("tp_size", "pass", f"TP {tp} uses all {count} GPUs"))


def _check_custom_all_reduce(effective, get, nccl, flags, cat, out):
    """Custom all-reduce, from the nccl decision."""
    # Custom all-reduce: the nccl role's GPU-pair facts, judged for this server's TP group(s)
    # by SGLang's own rule (gpuhost_nccl_car.py); an override there wins.
    car = nccl_car.for_server(
        nccl,
        effective["tp_size"],
        {flag: get(flag) for flag in nccl_car.LAYOUT_FLAGS},
        effective["env"],
        cat.version,
    )
    if car is not None:
        reason = car["reason"]
        if car["disable"]:
            flags["--disable-custom-all-reduce"] = True
            out.notes.append(f"--disable-custom-all-reduce added by the nccl decision: {reason}")
        else:
            out.notes.append(f"custom all-reduce left on by the nccl decision: {reason}")
        out.findings.append(
            _finding(
                "custom_all_reduce", "pass", f"{'off' if car['disable'] else 'on'} (nccl: {reason})"
            )
        )
    else:
        out.notes.append(
            "the nccl decision is not known yet (role nccl runs later): custom all-reduce "
            "is settled when the server is configured"
        )


def _check_listen(listen, out):
    """The listening address and the API key."""
    # Listening address and API key (DESIGN invariants).
    host = str(listen.get("host", LOOPBACK_HOSTS[0]))
    if not is_loopback(host) and not listen.get("api_key_set"):
        out.errors.append(
            f"sglang_server_host: got {host!r}, a non-loopback address, and sglang_server_api_key "
            "is empty; allowed: 127.0.0.1/::1, or set sglang_server_api_key (Vault or the "
            "GPUHOST_SGLANG_API_KEY environment variable). /health and /metrics answer without "
            "the key either way: firewall the port (sglang_server_firewall_cidrs)"
        )
        out.findings.append(
            _finding(
                "listen",
                "fail",
                f"listens on {host} without an API key",
                "set sglang_server_api_key or bind 127.0.0.1",
            )
        )
    elif listen.get("api_key_set") and not listen.get("api_key_valid", True):
        out.errors.append(
            "sglang_server_api_key: the value (not shown) is not 16 or more of the characters "
            "A-Z a-z 0-9 . _ ~ + / = -; allowed: such a string (it is masked in logs by "
            "exact match)"
        )
        out.findings.append(
            _finding("listen", "fail", "API key has characters that cannot be masked safely")
        )
    else:
        out.findings.append(
            _finding(
                "listen",
                "pass",
                f"listens on {host}" + (" with an API key" if listen.get("api_key_set") else ""),
            )
        )
    port = listen.get("port", SERVER_PORT)
    if not _intlike(port) or not 1 <= int(port) <= 65535:
        out.errors.append(f"sglang_server_port: got {port!r}; allowed: an integer 1-65535")


def _check_model_env(effective, out):
    """The model and the server env."""
    if not effective["model"]:
        out.errors.append(
            "sglang_server_model_id: empty and no profile selected (sglang_server_profile); "
            "allowed: a Hugging Face model id or a local path"
        )
    for name in effective["env"]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.errors.append(
                f"sglang_server_extra_env: {name!r} is not an environment variable name"
            )
        elif _owned_by_nccl(name):
            # The server env is merged over nccl.env: a NCCL_* (or gloo's interface) here
            # would silently undo role nccl's decision, e.g. the loopback binding of NCCL's
            # and gloo's sockets that no port rule covers.
            out.errors.append(
                f"sglang_server_extra_env (or the profile's env): {name} is role nccl's "
                f"decision (nccl.env, with its reason); allowed: set it in "
                f"nccl_env_overrides.{name}, never in the server's env"
            )


def validate(
    effective,
    catalogue,
    gpu=None,
    nccl=None,
    policy=None,
    listen=None,
    nccl_overrides=None,
    group=None,
):
    """Check an effective profile. Returns a dict:

    errors / warnings / notes: lists of message lines;
    findings: gpuhost_findings items (sglang_server.*);
    flags: the final flag mapping (canonical names, the nccl decision applied).

    policy: {force_kv_cache_auto: bool}
    listen: {host, port, api_key_set: bool, api_key_valid: bool, firewall_cidrs: [networks]}
    nccl_overrides: the inventory's nccl_env_overrides (the socket interface across nodes).
    group: sglang_server_serving_group ({} for a host alone): its --nnodes, --node-rank and
      --dist-init-addr join the flags, and its other nodes must be inside firewall_cidrs
      (gpuhost_profile_group.py).
    """
    policy = policy or {}
    listen = listen or {}
    out = _Report()
    _check_rendered_text(effective, out)
    cat = as_catalogue(catalogue)
    # flags: as the user spelled them (rendered); canon: by the catalogue's name (the rules).
    flags, canon, flag_errors, flag_warnings = check_flags(cat, effective["flags"])
    out.errors += flag_errors
    out.warnings += flag_warnings
    # The serving group's flags: after check_flags, which refuses them from anywhere else.
    group_flags, group_errors = group_rules.flags_of(group)
    out.errors += group_errors
    for flag, value in group_flags.items():
        flags[flag] = value
        canon[cat.options.get(flag, flag)] = value
    out.findings.append(
        _finding("flags", "fail", flag_errors[0], "see the run's error list")
        if flag_errors
        else _finding("flags", "pass", f"{len(flags)} flag(s) valid for sglang {cat.version}")
    )

    def get(name, default=None):
        return canon.get(cat.options.get(name, name), default)

    def has(name):
        return cat.options.get(name, name) in canon

    _check_remote_code(effective, get, out)
    _check_tokenizer_workers(get, out)
    count, sms = gpu_summary(gpu)
    no_gpu = count is None or count == 0
    if no_gpu:
        out.notes.append(
            "no NVIDIA GPU visible (gpuhost_gpu): GPU-count and architecture checks skipped"
        )

    _check_inert_flags(effective, get, has, sms, out)
    _check_kv_cache(effective, get, has, sms, policy, out)
    _check_parallelism(effective, get, count, no_gpu, nccl_overrides, out)
    _check_custom_all_reduce(effective, get, nccl, flags, cat, out)
    _check_listen(listen, out)
    if group_flags:
        across = group_rules.peers(group, listen.get("firewall_cidrs"))
        out.errors += across["errors"]
        out.warnings += across["warnings"]
        out.findings += across["findings"]
    _check_model_env(effective, out)
    return {
        "errors": out.errors,
        "warnings": out.warnings,
        "notes": out.notes,
        "findings": out.findings,
        "flags": flags,
    }
