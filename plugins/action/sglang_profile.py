# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: resolve, validate and render the SGLang serving profile (controller only).

Reads profiles/<name>.yml and data/sglang/catalogue-<version>.json on the controller, checks
the flags against the pinned sglang's argument catalogue and the host facts, and returns the
server's argv and ExecStart. Nothing is sent to the host, so it runs in preflight before any
change (playbooks/preflight.yml) and again when the unit is rendered (role sglang_server).
The rules live in plugins/plugin_utils/gpuhost_profile.py and gpuhost_profile_flags.py
(tests/test_profile_validate.py).

Sets the cacheable facts `gpuhost_sglang` (the resolved profile, argv, exec_start, env
without secrets, expected baseline, warnings, notes) and `gpuhost_findings` (its
`sglang_server.*` items replaced).
"""

from __future__ import annotations

import json
import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
---
action: gpuhost.gpu.sglang_profile
short_description: Resolve, validate and render the SGLang serving profile
options:
  profile:
    description: Name of a file in profiles_dir without .yml; auto to pick the first that fits
      the GPUs (gpuhost_profile_fit.select); empty for none.
    type: str
  profiles_dir:
    description: Where profiles live; default profiles/ of this repository.
    type: path
  overrides:
    description: model, served_model_name, revision, tp_size, flags, env, start_seconds.
    type: dict
  start_timeout:
    description: sglang_server_start_timeout; 0 derives the gate's timeout from the expected
      start (gpuhost_profile.start_timeout).
    type: int
  sglang_version:
    description: The pinned sglang version (selects the catalogue).
    type: str
  catalogue_dir:
    description: Default data/sglang/ of this repository.
    type: path
  gpu:
    description: The gpuhost_gpu fact, or {}.
    type: dict
  nccl:
    description: The gpuhost_nccl fact, or {}.
    type: dict
  nccl_overrides:
    description: The inventory's nccl_env_overrides (which interface NCCL's sockets use).
    type: dict
  group:
    description: sglang_server_serving_group, {} for a host alone. A group's --nnodes,
      --node-rank and --dist-init-addr join the flags; a profile must be sized for the group
      (its nodes); auto picks only among those (gpuhost_profile_group.py).
    type: dict
  firewall_cidrs:
    description: sglang_server_firewall_cidrs; every other node of the group must be inside.
    type: list
  host:
    type: str
  port:
    type: int
  api_key_set:
    description: Whether an API key is configured (the key itself is never passed).
    type: bool
  api_key_valid:
    description: Whether it matches the allowed characters.
    type: bool
  force_kv_cache_auto:
    type: bool
  entrypoint:
    description: argv prefix of the server, e.g. [python, -m, sglang.launch_server].
    type: list
  launcher:
    description: Path of gpuhost-sglang-launch on the host; empty for none.
    type: str
  model_path:
    description: Local weights path that replaces the model id; empty for none.
    type: str
  display:
    description: Print warnings and notes (false when already shown this run).
    type: bool
  models_lock:
    description: The inventory's models.lock.yml (controller path); empty disables pinning.
    type: str
  hub_endpoint:
    description: The model hub's base URL (resolves a branch to its commit sha and file sizes).
    type: str
  prestaged_bytes:
    description: Bytes of the pre-staged weights measured on the host; 0 when not pre-staged.
    type: int
  inputs:
    description: The caller's inputs that can change within a run, returned as is
      (C(inputs)) so that a later call of the same run can tell whether to resolve again
      (role sglang_server, tasks/validate.yml); they play no part in the resolve.
    type: raw
"""

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import SERVER_PORT  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_models_lock as models_lock  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as logic  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_fit as fit  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_group as grouping  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate as validation  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain  # noqa: E402 - after the doc blocks

_REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(dict(self._task.args))
        result["inputs"] = args.get("inputs")

        profile_name = args.get("profile") or ""
        profiles_dir = args.get("profiles_dir") or os.path.join(_REPO, "profiles")
        known = (
            sorted(f[:-4] for f in os.listdir(profiles_dir) if f.endswith(".yml"))
            if os.path.isdir(profiles_dir)
            else []
        )
        auto_message = ""
        group = args.get("group") or {}
        nodes = grouping.size(group)
        if profile_name == "auto":
            library = [(name, _load(profiles_dir, name)) for name in known]
            gpu = args.get("gpu") or {}
            chosen = fit.select(library, gpu, nodes=nodes)
            if not chosen["selected"] and not gpu.get("present", True):
                # No NVIDIA GPU at all: sglang_server installs nothing here (its preflight says
                # so), so there is nothing to pick and nothing to validate.
                message = (
                    "sglang_server_profile: auto picked no profile: this host has no NVIDIA GPU, "
                    "and sglang_server installs nothing on it"
                )
                if args.get("display", True):
                    self._display.display(f"sglang profile: {message}")
                result.update(changed=False, skipped=True, msg=message)
                return result
            if not chosen["selected"]:
                raise AnsibleActionFail(chosen["message"] + ". Nothing was changed.")
            profile_name, auto_message = chosen["selected"], chosen["message"]
        doc = {}
        if profile_name:
            if profile_name not in known:
                raise AnsibleActionFail(
                    f"sglang_server_profile: got {profile_name!r}; allowed: auto, one of "
                    f"{', '.join(known) or '(none found)'} (files in {profiles_dir}), or '' "
                    "for the sglang_server_* settings alone"
                )
            doc = _load(profiles_dir, profile_name)
            problems = fit.doc_problems(profile_name, doc)
            if problems:
                raise AnsibleActionFail("\n".join(problems))
            if grouping.profile_nodes(doc) != nodes:
                library = [(name, _load(profiles_dir, name)) for name in known]
                sized = grouping.nodes_problem(profile_name, doc, group, library)
                raise AnsibleActionFail(sized + ". Nothing was changed.")

        version = str(args.get("sglang_version") or "")
        catalogue_dir = args.get("catalogue_dir") or os.path.join(_REPO, "data", "sglang")
        catalogue_path = os.path.join(catalogue_dir, f"catalogue-{version}.json")
        if not os.path.isfile(catalogue_path):
            have = (
                sorted(f for f in os.listdir(catalogue_dir) if f.startswith("catalogue-"))
                if os.path.isdir(catalogue_dir)
                else []
            )
            raise AnsibleActionFail(
                f"sglang_server_sglang_version: no argument catalogue for sglang {version!r} "
                f"({catalogue_path}); catalogues present: {', '.join(have) or 'none'}. Build "
                "it with tools/sglang_catalogue.py (role python_env)"
            )
        with open(catalogue_path, encoding="utf-8") as handle:
            catalogue = json.load(handle)

        try:
            effective = logic.resolve(doc, args.get("overrides") or {})
            pinned = self._pin(effective, args)
            effective["revision"] = pinned["revision"]
            listen = {
                "host": args.get("host", "127.0.0.1"),
                "port": args.get("port", SERVER_PORT),
                "api_key_set": bool(args.get("api_key_set")),
                "api_key_valid": bool(args.get("api_key_valid", True)),
                "firewall_cidrs": list(args.get("firewall_cidrs") or []),
            }
            timeout, timeout_source = logic.start_timeout(
                effective["start_seconds"], args.get("start_timeout") or 0
            )
            checked = logic.validate(
                effective,
                catalogue,
                gpu=args.get("gpu") or {},
                nccl=args.get("nccl") or {},
                policy={
                    "force_kv_cache_auto": bool(args.get("force_kv_cache_auto")),
                },
                listen=listen,
                nccl_overrides=args.get("nccl_overrides") or {},
                group=group,
            )
        except logic.ProfileError as exc:
            raise AnsibleActionFail(f"sglang_server_profile {profile_name!r}: {exc}") from exc

        if auto_message:
            checked["notes"].insert(0, auto_message)
        checked["warnings"] += pinned["warnings"]
        # A profile file is plain text: a secret-named variable in its env is one in clear.
        checked["warnings"] += validation.plain_text_env_secrets(
            doc.get("env") or {}, lambda _value: False, where=f"profile {profile_name} env"
        )
        checked["notes"] += pinned["notes"]
        self._fit(effective, args, pinned, checked, nodes)

        findings = [
            f
            for f in task_vars.get("gpuhost_findings") or []
            if not str(f.get("check", "")).startswith("sglang_server.")
        ] + checked["findings"]

        display = args.get("display", True)
        if display:
            for line in checked["warnings"]:
                self._display.warning(f"sglang profile: {line}")
            for line in checked["notes"]:
                self._display.display(f"sglang profile: {line}")

        if checked["errors"]:
            result.update(
                failed=True,
                changed=False,
                errors=checked["errors"],
                ansible_facts={"gpuhost_findings": findings},
                msg=(
                    f"serving profile {profile_name or '(inline)'} rejected for sglang {version}, "
                    f"nothing was changed:\n" + "\n".join(checked["errors"])
                ),
            )
            return result

        server_args = logic.render_args(
            effective, checked["flags"], listen, args.get("model_path") or None
        )
        entry = [str(a) for a in args.get("entrypoint") or []]
        launcher = args.get("launcher") or ""
        argv = ([entry[0], launcher, *entry[1:]] if launcher else entry) + server_args
        plan = {
            "profile": profile_name,
            "description": effective["description"],
            "sglang_version": version,
            "model": effective["model"],
            "revision": effective["revision"],
            "revision_branch": pinned["branch"],
            "revision_pinned": pinned["how"],
            "served_model_name": effective["served_model_name"],
            "tp_size": int(effective["tp_size"]),
            "host": listen["host"],
            "port": int(listen["port"]),
            "api_key_set": listen["api_key_set"],
            "flags": checked["flags"],
            "env": {k: str(v) for k, v in effective["env"].items()},
            "server_args": server_args,
            "argv": argv,
            "exec_start": logic.exec_start(argv),
            "expected_baseline": effective["expected_baseline"],
            "download_gib": effective["download_gib"],
            "start_seconds": int(effective["start_seconds"] or 0),
            "start_timeout": timeout,
            "start_timeout_source": timeout_source,
            "model_fit": checked.get("model_fit") or {},
            "nccl_decided": isinstance(
                (args.get("nccl") or {}).get("disable_custom_all_reduce"), bool
            ),
            "warnings": checked["warnings"],
            "notes": checked["notes"],
        }
        result.update(
            changed=False,
            ansible_facts={"gpuhost_sglang": plan, "gpuhost_findings": findings},
            _ansible_facts_cacheable=True,
            msg=f"profile {profile_name or '(inline)'} valid for sglang {version}: "
            + plan["exec_start"],
        )
        return result

    # ----------------------------------------------------------------------------------
    # pinned weights (gpuhost_models_lock) and the model-fit check (gpuhost_profile_fit)

    def _pin(self, effective, args):
        """The revision to serve: a sha as it is; a branch through the inventory's lock."""
        branch = effective["revision"]
        out = {"revision": branch, "branch": "", "how": "", "notes": [], "warnings": []}
        out["weights_bytes"] = None
        lock = args.get("models_lock") or ""
        model = effective["model"]
        if models_lock.is_sha(branch):
            out["how"] = "sha"
            return out
        if not lock or not model or models_lock.is_local(model) or args.get("model_path"):
            out["notes"].append(
                f"revision {branch} is not pinned"
                + (
                    " (nothing is downloaded, or sglang_server_models_lock is empty)"
                    if not lock
                    else " (local weights)"
                )
            )
            return out
        endpoint = args.get("hub_endpoint") or ""
        token = os.environ.get("HF_TOKEN") or None

        def resolve(repo, rev):
            return models_lock.hub_revision(endpoint, repo, rev, token=token)

        check_mode = bool(self._play_context.check_mode)
        try:
            got = models_lock.pin(lock, model, branch, resolve, write=not check_mode)
        except models_lock.HubError as exc:
            out["warnings"].append(
                f"revision {branch} of {model} is not pinned: the hub ({endpoint}) did not "
                f"answer ({exc}), so this run follows the branch. The next run that reaches "
                f"the hub pins it in {lock}"
            )
            return out
        except ValueError as exc:
            raise AnsibleActionFail(f"sglang_server_models_lock: {exc}") from exc
        out.update(revision=got["sha"], branch=branch, how=got["pinned"])
        out["weights_bytes"] = got["entry"].get("weights_bytes")
        out["notes"].append(
            {
                "lock": f"{model}@{branch} pinned to {got['sha']} by {lock}",
                "new": f"{model}@{branch} resolved to {got['sha']} and pinned in {lock}",
                "would": (
                    f"{model}@{branch} is at {got['sha']} on the hub; check mode writes no "
                    f"pin (the first real run pins it in {lock})"
                ),
            }[got["pinned"]]
        )
        return out

    def _fit(self, effective, args, pinned, checked, nodes=1):
        """Weights plus KV-cache room against the GPUs: an error naming the numbers."""
        gpus = fit.measured(args.get("gpu") or {})
        if gpus is None:
            checked["notes"].append("no GPU measured: the model-fit check is skipped")
            return
        weights = None
        if int(args.get("prestaged_bytes") or 0) > 0:
            weights = {"bytes": int(args["prestaged_bytes"]), "source": "the pre-staged path"}
        elif pinned.get("weights_bytes"):
            weights = {
                "bytes": pinned["weights_bytes"],
                "source": f"the hub's file list at {pinned['revision'][:12]}",
            }
        result = fit.fit(effective, gpus, weights, nodes=nodes)
        checked["model_fit"] = result["numbers"]
        if result["ok"]:
            checked["notes"] += [f"model fit: {line}" for line in result["lines"]]
            checked["findings"].append(
                _finding("model_fit", "pass", "; ".join(result["lines"]) or "fits")
            )
            return
        for reason in result["reasons"]:
            where = "this host" if nodes == 1 else f"this group's {nodes} hosts"
            checked["errors"].append(f"model fit: {effective['model']} on {where}: {reason}")
        checked["findings"].append(
            _finding(
                "model_fit",
                "fail",
                result["reasons"][0],
                "select a profile sized for this host (sglang_server_profile: auto picks one)",
            )
        )


_finding = prefixed("sglang_server.")


def _load(profiles_dir, name):
    path = os.path.join(profiles_dir, f"{name}.yml")
    with open(path, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle) or {}
    if not isinstance(doc, dict):
        raise AnsibleActionFail(f"sglang_server_profile {name}: {path} is not a mapping")
    return doc
