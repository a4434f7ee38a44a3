"""The serving-profile rules (plugins/plugin_utils/gpuhost_profile.py), each on both sides.

Catalogues: the reference profile is checked against the real catalogues that role
python_env builds from the pinned wheels (data/sglang/catalogue-<version>.json). The rule
tests use small catalogues built below in the same shape (tools/sglang_catalogue.py), so
each rule is tested on its own, whatever the pinned versions contain.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serving_group import of_host

ROOT = Path(__file__).resolve().parents[1]


# With the commit the models lock pins its branch to (it passes --trust-remote-code, which the
# validator serves only from a sha: tests/test_profile_remote_code.py).
REFERENCE = {
    **yaml.safe_load((ROOT / "profiles" / "glm5-nvfp4-8x-rtx-pro-6000.yml").read_text()),
    "revision": "0123456789abcdef0123456789abcdef01234567",
}
REAL_CATALOGUES = sorted((ROOT / "data" / "sglang").glob("catalogue-*.json"))


# --- catalogues in the tools/sglang_catalogue.py shape ---------------------------------


def _flag(*names, type="str", choices=None, action="store", nargs=None, deprecated=False):
    return names[0], {
        "dest": names[0][2:].replace("-", "_"),
        "aliases": list(names),
        "action": action,
        "type": "bool" if action == "store_true" else type,
        "choices": choices,
        "default": None,
        "nargs": 0 if action == "store_true" else nargs,
        "deprecated": deprecated,
        "help": "deprecated" if deprecated else "",
    }


def catalogue(version="0.5.10.post1", dsa_names=False):
    dsa = ["flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "aiter", "trtllm"]
    prefix = "--dsa" if dsa_names else "--nsa"
    flags = dict(
        [
            _flag("--model-path", "--model"),
            _flag("--served-model-name"),
            _flag("--host"),
            _flag("--port", type="int"),
            _flag("--tp-size", "--tensor-parallel-size", type="int"),
            _flag("--pp-size", "--pipeline-parallel-size", type="int"),
            _flag("--nnodes", type="int"),
            _flag("--node-rank", type="int"),
            _flag("--dist-init-addr", "--nccl-init-addr"),
            _flag("--revision"),
            _flag("--api-key"),
            _flag("--admin-api-key"),
            _flag("--trust-remote-code", action="store_true"),
            _flag("--reasoning-parser", choices=["deepseek-r1", "glm45", "qwen3"]),
            _flag("--tool-call-parser", choices=["glm", "glm45", "glm47", "qwen25"]),
            _flag("--quantization", choices=["fp8", "modelopt_fp4", "awq"]),
            _flag("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"]),
            _flag("--attention-backend", choices=["flashinfer", "triton", "fa3", "nsa"]),
            _flag("--moe-runner-backend", choices=["auto", "triton", "flashinfer_cutlass"]),
            _flag("--mem-fraction-static", type="float"),
            _flag("--max-running-requests", type="int"),
            _flag("--disable-custom-all-reduce", action="store_true"),
            _flag(
                "--enable-flashinfer-allreduce-fusion", action="store_true", deprecated=dsa_names
            ),
            _flag("--fp8-gemm-backend", choices=["auto", "cutlass", "triton"]),
            _flag("--fp4-gemm-backend", choices=["auto", "flashinfer_cutlass"]),
            _flag(f"{prefix}-prefill-backend", choices=dsa),
            _flag(f"{prefix}-decode-backend", choices=dsa),
            _flag("--json-model-override-args"),
            _flag("--enable-metrics", action="store_true"),
            _flag("--tokenizer-worker-num", type="int"),
        ]
    )
    return {"sglang_version": version, "flags": flags}


def gpus(count=8, cc="12.0"):
    """A gpuhost_gpu fact (docs/facts.md) with `count` GPUs of compute capability `cc`."""
    return {
        "present": count > 0,
        "driver": {"loaded": True, "version": "580.95.05"},
        "count": count,
        "gpus": [{"index": i, "compute_capability": cc} for i in range(count)],
    }


NO_P2P = {
    "disable_custom_all_reduce": True,
    "reasons": [
        {
            "variable": "disable_custom_all_reduce",
            "value": True,
            "reason": "not every GPU pair has P2P",
        }
    ],
}
LOOPBACK = {"host": "127.0.0.1", "port": 30000, "api_key_set": False, "api_key_valid": True}


def check(
    flags=None,
    remove=(),
    gpu=None,
    nccl=None,
    policy=None,
    listen=None,
    cat=None,
    nccl_overrides=None,
    group=None,
    **over,
):
    overrides = {"flags": {**{f: None for f in remove}, **(flags or {})}, **over}
    eff = profile.resolve(REFERENCE, overrides)
    return eff, profile.validate(
        eff,
        cat or catalogue(),
        gpu=gpus() if gpu is None else gpu,
        nccl=nccl,
        policy=policy,
        listen=listen or LOOPBACK,
        nccl_overrides=nccl_overrides,
        group=group,
    )


# sglang_server_serving_group of rank 1 in a group of two (gpuhost_serving_group.of_host).
TWO_NODES = of_host(
    "gpu-b",
    {
        name: {
            "sglang_server_group": "ds",
            "sglang_server_node_rank": -1,
            "sglang_server_group_address": address,
            "sglang_server_dist_init_port": 20000,
        }
        for name, address in (("gpu-a", "10.0.0.2"), ("gpu-b", "10.0.0.3"))
    },
)
IN_CIDRS = {**LOOPBACK, "firewall_cidrs": ["10.0.0.0/24"]}


def only(result, kind):
    return "\n".join(result[kind])


# --- the reference profile ------------------------------------------------------------

EXPECTED_ARGS = (
    "--model-path lukealonso/GLM-5-NVFP4 --served-model-name glm-5 --host 127.0.0.1 "
    "--port 30000 --tp-size 8 --revision 0123456789abcdef0123456789abcdef01234567 "
    "--reasoning-parser glm45 --tool-call-parser glm47 "
    "--trust-remote-code --quantization modelopt_fp4 --kv-cache-dtype bf16 "
    "--attention-backend flashinfer --moe-runner-backend flashinfer_cutlass "
    "--mem-fraction-static 0.92 --max-running-requests 64 --disable-custom-all-reduce"
)
ENTRY = ["/opt/gpuhost/venv/bin/python", "-m", "sglang.launch_server"]
LAUNCHER = "/opt/gpuhost/libexec/gpuhost-sglang-launch"


def test_reference_profile_renders_the_corrected_command():
    eff, result = check(nccl=NO_P2P)
    assert result["errors"] == []
    assert result["warnings"] == []
    args = profile.render_args(eff, result["flags"], LOOPBACK)
    argv = [ENTRY[0], LAUNCHER, *ENTRY[1:], *args]
    assert (
        profile.exec_start(argv) == f"{ENTRY[0]} {LAUNCHER} -m sglang.launch_server {EXPECTED_ARGS}"
    )
    # Corrected per docs/reference.md §2: no abbreviation, no inert flag, bf16 KV.
    for dropped in (
        "--tp ",
        "--nsa-",
        "--enable-flashinfer-allreduce-fusion",
        "--fp8-gemm-backend",
        "0.0.0.0",
        "auto",
    ):
        assert dropped not in " ".join(args) + " "


@pytest.mark.parametrize("path", REAL_CATALOGUES, ids=lambda p: p.stem)
def test_reference_profile_against_the_real_catalogues(path):
    cat = json.loads(path.read_text())
    _, result = check(nccl=NO_P2P, cat=cat)
    assert result["errors"] == [], result["errors"]
    assert result["warnings"] == [], result["warnings"]


def test_real_catalogues_carry_the_rules_this_module_relies_on():
    """The docs/reference.md §2 facts, read from the pinned wheels' catalogues."""
    versions = {
        json.loads(p.read_text())["sglang_version"]: json.loads(p.read_text())
        for p in REAL_CATALOGUES
    }
    assert {"0.5.10.post1", "0.5.23"} <= set(versions)
    old, new = versions["0.5.10.post1"], versions["0.5.23"]
    _, result = check(flags={"--tp": 8}, cat=old)
    assert "write --tp-size" in only(result, "errors")
    _, result = check(
        flags={"--nsa-decode-backend": "trtllm", "--attention-backend": "nsa"}, cat=new
    )
    assert "was renamed --dsa-decode-backend" in only(result, "errors")
    _, result = check(flags={"--nsa-decode-backend": "trtllm"}, cat=old)
    assert result["errors"] == [] and "inert" in only(result, "warnings")
    _, result = check(flags={"--enable-flashinfer-allreduce-fusion": True}, cat=new)
    assert "deprecated in sglang 0.5.23" in only(result, "warnings")


def test_reference_profile_carries_the_seed_baseline():
    points = {
        (p["concurrency"], p["input_len"], p["output_len"]): p
        for p in REFERENCE["expected_baseline"]["points"]
    }
    assert points[(1, 256, 256)]["output_tok_s"] == 11
    assert points[(64, 256, 256)]["output_tok_s_min"] == 195
    assert points[(64, 256, 256)]["output_tok_s_max"] == 225


# --- flags against the catalogue ------------------------------------------------------


def test_known_flag_passes_and_unknown_flag_fails_with_a_hint():
    _, ok = check(flags={"--max-running-requests": 32})
    assert ok["errors"] == []
    _, bad = check(flags={"--max-runing-requests": 32})
    assert "--max-runing-requests is not a flag of sglang 0.5.10.post1" in only(bad, "errors")
    assert "did you mean --max-running-requests" in only(bad, "errors")


def test_prefix_abbreviation_is_rejected_in_favour_of_the_full_name():
    _, bad = check(flags={"--tp": 8})
    assert "argparse would take it as an abbreviation of --tp-size" in only(bad, "errors")
    assert "write --tp-size, and it is set through sglang_server_tp_size" in only(bad, "errors")
    _, other = check(flags={"--max-running": 8})
    assert "write --max-running-requests" in only(other, "errors")
    _, alias = check(flags={"--trust-remote-code": True})
    assert alias["errors"] == []


def test_nsa_names_on_a_version_that_renamed_them_fail_with_the_new_name():
    cat = catalogue("0.5.20", dsa_names=True)
    _, bad = check(flags={"--nsa-decode-backend": "trtllm", "--attention-backend": "nsa"}, cat=cat)
    assert "was renamed --dsa-decode-backend" in only(bad, "errors")
    _, good = check(flags={"--dsa-decode-backend": "trtllm", "--attention-backend": "nsa"}, cat=cat)
    assert good["errors"] == []
    # And the new name on an old version points back to the old one.
    _, old = check(flags={"--dsa-decode-backend": "trtllm"})
    assert "this version calls it --nsa-decode-backend" in only(old, "errors")


def test_invalid_choice_fails_listing_the_allowed_values():
    _, bad = check(flags={"--moe-runner-backend": "flashinfer_trtllm"})
    assert "'flashinfer_trtllm' is not a choice" in only(bad, "errors")
    assert "allowed: auto, triton, flashinfer_cutlass" in only(bad, "errors")


def test_value_types_and_switches():
    _, bad = check(flags={"--max-running-requests": "many", "--trust-remote-code": "yes"})
    assert "--max-running-requests needs an integer" in only(bad, "errors")
    assert "--trust-remote-code is a switch" in only(bad, "errors")
    _, bad = check(flags={"--quantization": True})
    assert "--quantization takes a value" in only(bad, "errors")


def test_flags_with_their_own_variable_are_refused():
    for flag in (
        "--tp-size",
        "--port",
        "--api-key",
        "--admin-api-key",
        "--model-path",
        "--disable-custom-all-reduce",
    ):
        _, bad = check(flags={flag: True if flag.startswith("--disable") else "x"})
        assert f"{flag} is set through" in only(bad, "errors"), flag


def test_more_than_one_tokenizer_worker_is_refused_since_sglang_then_checks_no_key():
    _, ok = check(flags={"--tokenizer-worker-num": 1})
    assert "tokenizer-worker-num" not in only(ok, "errors")
    _, bad = check(flags={"--tokenizer-worker-num": 4})
    message = only(bad, "errors")
    assert "sglang_server_flags: --tokenizer-worker-num 4; allowed: 1" in message
    assert "checks neither the client API key nor the admin key" in message


def test_deprecated_flag_warns():
    cat = catalogue("0.5.20", dsa_names=True)
    _, result = check(
        flags={"--enable-flashinfer-allreduce-fusion": True}, gpu=gpus(8, "10.0"), cat=cat
    )
    assert "deprecated in sglang 0.5.20" in only(result, "warnings")


# --- flags inert on this host ---------------------------------------------------------


def test_allreduce_fusion_is_inert_on_sm120_but_not_on_sm100():
    _, sm120 = check(flags={"--enable-flashinfer-allreduce-fusion": True})
    assert "inert on SM120" in only(sm120, "warnings")
    assert sm120["errors"] == []
    _, sm100 = check(flags={"--enable-flashinfer-allreduce-fusion": True}, gpu=gpus(8, "10.0"))
    assert "allreduce-fusion" not in only(sm100, "warnings")


def test_nsa_backends_are_inert_without_the_nsa_attention_backend():
    _, inert = check(flags={"--nsa-decode-backend": "trtllm"})
    assert "only read with --attention-backend nsa" in only(inert, "warnings")
    _, used = check(flags={"--nsa-decode-backend": "trtllm", "--attention-backend": "nsa"})
    assert "only read with" not in only(used, "warnings")


def test_fp8_gemm_backend_is_inert_for_nvfp4_only():
    _, inert = check(flags={"--fp8-gemm-backend": "cutlass"})
    assert "--fp4-gemm-backend" in only(inert, "warnings")
    _, fp8 = check(
        flags={"--fp8-gemm-backend": "cutlass", "--quantization": "fp8"},
        model="someorg/Some-FP8-Model",
    )
    assert "fp8-gemm" not in only(fp8, "warnings")


# --- kv-cache dtype for DSA models on SM >= 10 ---------------------------------------------


def test_kv_cache_auto_on_sm120_with_glm5_fails_with_the_explanation():
    _, bad = check(flags={"--kv-cache-dtype": "auto"})
    text = only(bad, "errors")
    assert "becomes fp8_e4m3" in text and "garbled output on SM120" in text
    assert "set '--kv-cache-dtype': bf16" in text
    # Absent is the same as auto.
    _, absent = check(remove=["--kv-cache-dtype"])
    assert "the default when the flag is absent" in only(absent, "errors")


def test_kv_cache_auto_is_fine_before_sm100_or_for_a_non_dsa_model():
    _, hopper = check(flags={"--kv-cache-dtype": "auto"}, gpu=gpus(8, "9.0"))
    assert hopper["errors"] == []
    plain = {**REFERENCE, "dsa": False, "model": "Qwen/Qwen3-8B"}
    eff = profile.resolve(plain, {"flags": {"--kv-cache-dtype": "auto"}})
    result = profile.validate(eff, catalogue(), gpu=gpus(), listen=LOOPBACK)
    assert result["errors"] == []


def test_kv_cache_auto_policy_override_turns_the_failure_into_a_warning():
    _, forced = check(flags={"--kv-cache-dtype": "auto"}, policy={"force_kv_cache_auto": True})
    assert forced["errors"] == []
    assert "kept because sglang_server_force_kv_cache_auto is true" in only(forced, "warnings")


# --- TP against the GPU count -------------------------------------------------------------


def test_tp_larger_than_the_gpu_count_fails():
    _, bad = check(gpu=gpus(4))
    error = only(bad, "errors")
    assert "sglang_server_tp_size: got 8; this host has 4 GPU(s)" in error
    # The way out names the profile variable first: a profile's TP is sized to its model.
    assert "Select a profile sized for 4 GPU(s) with sglang_server_profile" in error
    (finding,) = [f for f in bad["findings"] if f["check"] == "sglang_server.tp_size"]
    assert finding["fix"].endswith("or set sglang_server_tp_size <= 4 if the model fits")
    _, ok = check(gpu=gpus(8))
    assert ok["errors"] == []


def test_tp_smaller_than_the_gpu_count_warns_and_multinode_splits():
    _, idle = check(tp_size=4)
    assert "uses 4 of this host's 8 GPUs" in only(idle, "warnings")
    _, two_nodes = check(
        tp_size=16,
        group=TWO_NODES,
        listen=IN_CIDRS,
        nccl_overrides={"NCCL_SOCKET_IFNAME": "=eth0"},
    )
    assert two_nodes["errors"] == []
    # Without the group, TP 16 is 16 GPUs on this host of 8.
    _, alone = check(tp_size=16, nccl_overrides={"NCCL_SOCKET_IFNAME": "=eth0"})
    assert "needs 16 per node (TP 16 x PP 1 / 1 node(s))" in only(alone, "errors")


def test_a_server_across_nodes_needs_the_nccl_interface_named():
    # Role nccl keeps NCCL's sockets on loopback: the nodes could not reach each other.
    _, loop = check(tp_size=16, group=TWO_NODES, listen=IN_CIDRS)
    (error,) = loop["errors"]
    assert error.startswith("nccl_env_overrides.NCCL_SOCKET_IFNAME: got 'lo'")
    assert "--nnodes 2" in error and "allowed: the interface the nodes reach" in error
    (finding,) = [f for f in loop["findings"] if f["check"] == "sglang_server.nccl_socket_ifname"]
    assert finding["status"] == "fail"
    # Naming lo by hand is the same mistake; removing the variable lets NCCL pick one.
    _, named_lo = check(
        tp_size=16, group=TWO_NODES, listen=IN_CIDRS, nccl_overrides={"NCCL_SOCKET_IFNAME": "lo"}
    )
    assert len(named_lo["errors"]) == 1
    _, unset = check(
        tp_size=16, group=TWO_NODES, listen=IN_CIDRS, nccl_overrides={"NCCL_SOCKET_IFNAME": None}
    )
    assert unset["errors"] == []
    # One node: loopback is right, nothing to say.
    _, one = check()
    assert not [f for f in one["findings"] if f["check"] == "sglang_server.nccl_socket_ifname"]


def test_without_gpus_the_gpu_checks_are_skipped_and_say_so():
    _, none = check(gpu={})
    assert none["errors"] == []
    assert "GPU-count and architecture checks skipped" in only(none, "notes")


# --- custom all-reduce follows the nccl decision ------------------------------------------


def test_custom_all_reduce_follows_the_nccl_decision():
    _, off = check(nccl=NO_P2P)
    assert off["flags"].get("--disable-custom-all-reduce") is True
    assert "not every GPU pair has P2P" in only(off, "notes")
    _, on = check(nccl={"disable_custom_all_reduce": False, "reasons": []})
    assert "--disable-custom-all-reduce" not in on["flags"]
    _, unknown = check(nccl=None)
    assert "--disable-custom-all-reduce" not in unknown["flags"]
    assert "nccl decision is not known yet" in only(unknown, "notes")


def test_custom_all_reduce_override_is_the_nccl_roles():
    overridden = {
        "disable_custom_all_reduce": False,
        "reasons": [],
        "overrides": [{"variable": "disable_custom_all_reduce", "value": False}],
    }
    _, result = check(nccl=overridden)
    assert "--disable-custom-all-reduce" not in result["flags"]
    assert "overridden in nccl_env_overrides" in only(result, "notes")


# --- listening address and key -------------------------------------------------------------


def test_non_loopback_host_needs_an_api_key():
    open_listen = {"host": "0.0.0.0", "port": 30000, "api_key_set": False}
    _, bad = check(listen=open_listen)
    assert "sglang_server_host: got '0.0.0.0'" in only(bad, "errors")
    _, ok = check(listen={**open_listen, "api_key_set": True, "api_key_valid": True})
    assert ok["errors"] == []


def test_a_bad_api_key_is_rejected_without_being_shown():
    _, bad = check(listen={**LOOPBACK, "api_key_set": True, "api_key_valid": False})
    assert "sglang_server_api_key: the value (not shown)" in only(bad, "errors")


# --- resolve and render ----------------------------------------------------------------------


def test_overrides_win_and_null_removes_a_profile_flag():
    eff = profile.resolve(
        REFERENCE,
        {
            "flags": {"--mem-fraction-static": 0.88, "--tool-call-parser": None},
            "served_model_name": "glm5",
            "env": {"X": "1"},
        },
    )
    assert eff["flags"]["--mem-fraction-static"] == 0.88
    assert "--tool-call-parser" not in eff["flags"]
    assert eff["served_model_name"] == "glm5"
    assert eff["env"]["X"] == "1" and eff["env"]["OMP_NUM_THREADS"] == "8"
    assert eff["tp_size"] == 8 and eff["model"] == "lukealonso/GLM-5-NVFP4"


def test_no_profile_and_no_model_fails():
    eff = profile.resolve({}, {})
    result = profile.validate(eff, catalogue(), gpu={}, listen=LOOPBACK)
    assert "sglang_server_model_id: empty and no profile selected" in only(result, "errors")


def test_revision_and_local_path_render():
    eff = profile.resolve({**REFERENCE, "revision": "abc123"}, {})
    args = profile.render_args(eff, {}, LOOPBACK)
    assert args[-2:] == ["--revision", "abc123"]
    staged = profile.render_args(eff, {}, LOOPBACK, model_path="/mnt/models/glm5")
    assert staged[:2] == ["--model-path", "/mnt/models/glm5"] and "--revision" not in staged


@pytest.mark.parametrize(
    "arg",
    ["plain", "with space", 'quo"te', "back\\slash", "100%", "$HOME", '{"a": 1}', ""],
)
def test_systemd_quoting_round_trips(arg):
    quoted = profile.systemd_quote(arg)
    # systemd unquotes like a shell for these characters, then undoes %% and $$.
    back = shlex.split(quoted.replace("%%", "%").replace("$$", "$"), posix=True)
    assert back == [arg]


def test_env_values_are_quoted_for_an_environment_file():
    assert profile.env_value("plain") == "plain"
    assert profile.env_value("a b") == '"a b"'
    assert profile.env_value(True) == "1"


def test_control_characters_in_rendered_values_fail():
    """A newline in the served name (from a profile file) would be a new unit directive."""
    _, result = check(served_model_name="glm-5\nExecStartPre=+/bin/sh -c id")
    assert any(
        e.startswith(
            "served_model_name: got 'glm-5\\nExecStartPre=+/bin/sh -c id'; allowed: "
            "text without control characters (found '\\n')"
        )
        for e in result["errors"]
    ), result["errors"]
    _, result = check(env={"X": "a\rb"})
    assert any(e.startswith("env: got ") for e in result["errors"]), result["errors"]


@pytest.mark.parametrize("name", ["NCCL_SOCKET_IFNAME", "NCCL_P2P_LEVEL", "GLOO_SOCKET_IFNAME"])
def test_nccl_variables_in_the_server_env_are_refused(name):
    # nccl.env binds NCCL's and gloo's sockets to lo; the server env is merged over it, so an
    # interface named here would undo that binding without a word (issue 28 item 8).
    _, result = check(env={name: "eth0"})
    assert any(
        e.startswith("sglang_server_extra_env (or the profile's env): " + name)
        and "nccl_env_overrides." + name in e
        for e in result["errors"]
    ), result["errors"]
    _, plain = check(env={"SGLANG_ENABLE_JIT_DEEPGEMM": "0"})
    assert plain["errors"] == []
