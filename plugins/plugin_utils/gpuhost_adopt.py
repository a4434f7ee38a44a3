# Copyright: gpuhost contributors
# Apache-2.0
"""From a hand-started SGLang server to the gpuhost settings that reproduce it (issue 31
item 1; docs/adopt.md).

Pure: the server as the sglang_discover module reports it, the host facts (docs/facts.md),
the profile library, the argument catalogues and the locks' versions in; a proposal out:

- inventory: the settings that reproduce the server (model, TP, listen address, served name,
  revision, lane, the NCCL overrides kept, the flags and env the profile lacks);
- profile: the closest library profile (by model, GPUs and flags), or "" for an inline one;
- items: every flag, environment variable and package of the server, each `kept`, `dropped`
  or `changed`, with the reason the product already gives (the profile validator, the NCCL
  decision, the listen rule: each is called here, none is repeated);
- differences: what the managed server does differently.

Controller-only (plugin_utils): the adopt_propose action plugin and tests/test_adopt.py call it.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import (
    SERVER_PORT,
    is_loopback,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import REDACTED
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_catalogue
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl as nccl
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_fit as fit
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_adopt_items import (
    STATUSES,
    env_item,
    item,
    lane_for,
    nccl_item,
    package_items,
    same,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_flags import (
    RESERVED,
    check_flags,
    resolve_flag,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_group import GROUP_FLAGS

# Flags gpuhost renders from one inventory setting each (RESERVED says which, in words).
INVENTORY_FLAGS = {
    "--model-path": "sglang_server_model_id",
    "--served-model-name": "sglang_server_served_model_name",
    "--tp-size": "sglang_server_tp_size",
    "--port": "sglang_server_port",
    "--revision": "sglang_server_revision",
}
SGLANG_HOST = "127.0.0.1"  # sglang.launch_server's own default (docs/reference.md §2)
_SHA = re.compile(r"[0-9a-f]{40}")
_FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def _subject(message):
    """The flag a validator message is about: the first one it names."""
    found = _FLAG.search(message)
    return found.group(1) if found else None


def _typed(cat, name, value):
    """The value as the profile writes it: a number for an int/float flag."""
    kind = str(cat.flags.get(cat.options.get(name, name), {}).get("type") or "")
    try:
        if kind == "int" and isinstance(value, str):
            return int(value)
        if kind == "float" and isinstance(value, str):
            return float(value)
    except ValueError:
        return value
    return value


# --------------------------------------------------------------------------------------
# flags


class _Flags:
    """The server's flags, classified one by one."""

    def __init__(self, cat, decision):
        self.cat, self.decision = cat, decision
        self.items, self.inventory, self.profile_flags = [], {}, {}

    def canonical(self, flag):
        try:
            found = self.cat.resolve(flag)
        except gpuhost_catalogue.AmbiguousFlag as exc:
            # Several spellings of one flag (--tp: --tp-size, --tp-size-x) are one flag.
            names = {self.cat.options[m] for m in exc.matches}
            if len(names) != 1:
                return None, None
            return names.pop(), resolve_flag(self.cat, flag)[1]
        except gpuhost_catalogue.CatalogueError:
            return flag if flag in RESERVED else None, None
        note = resolve_flag(self.cat, flag)[1] if found.how == "prefix" else None
        # The catalogue's key may be an alias (--tensor-parallel-size for --tp-size): the
        # name RESERVED uses for the same flag.
        for reserved in RESERVED:
            if self.cat.options.get(reserved) == found.name:
                return reserved, note
        return found.name, note

    def add(self, flag, value):
        name, note = self.canonical(flag)
        spelled = f" ({note})" if note else ""
        if name in INVENTORY_FLAGS:
            setting = INVENTORY_FLAGS[name]
            self.inventory[setting] = _typed(self.cat, name, value)
            self.items.append(
                item("flag", flag, value, "kept", f"set through {RESERVED[name]}{spelled}", setting)
            )
        elif name == "--disable-custom-all-reduce":
            self._custom_all_reduce(flag, value)
        elif name in GROUP_FLAGS:
            # A server across nodes: its group settings render these on every node.
            self.items.append(
                item("flag", flag, value, "changed", f"set through {RESERVED[name]}{spelled}",
                     "sglang_server_group")
            )  # fmt: skip
        elif name in ("--host", "--api-key", "--admin-api-key"):
            return name  # the listen rule needs all three: listen() below
        else:
            errors = check_flags(self.cat, {flag: value})[2]
            if errors:
                self.items.append(item("flag", flag, value, "dropped", errors[0]))
            else:
                self.profile_flags[flag] = _typed(self.cat, name, value)
        return None

    def _custom_all_reduce(self, flag, value):
        disable = self.decision.get("disable_custom_all_reduce")
        why = next(
            (
                r["reason"]
                for r in self.decision.get("reasons", [])
                if r["variable"] == "disable_custom_all_reduce"
            ),
            "",
        )
        if disable:
            self.items.append(
                item("flag", flag, value, "kept", f"role nccl adds it here: {why}", "nccl")
            )
        else:
            self.items.append(item("flag", flag, value, "dropped", f"role nccl's decision: {why}"))


def listen(given, cat, items, inventory, todo):
    """--host, --api-key, --admin-api-key: the listen rule of gpuhost_profile.validate.
    given: {the flag's name: (as the server spelled it, its value)}."""
    flags = {name: value for name, (_, value) in given.items()}

    def flag_item(name, *rest):  # named as the server spelled it (--host=..., an alias)
        return item("flag", given.get(name, (name,))[0], *rest)

    host = flags.get("--host", SGLANG_HOST)
    port = inventory.get("sglang_server_port", SERVER_PORT)
    keyed = "--api-key" in flags
    inventory["sglang_server_host"] = host
    checked = profile.validate(
        {"model": "x", "flags": {}, "env": {}, "tp_size": 1},
        cat,
        listen={"host": host, "port": port, "api_key_set": keyed},
    )
    refusal = next((e for e in checked["errors"] if e.startswith("sglang_server_host")), "")
    if "--host" in flags and is_loopback(host):
        items.append(flag_item("--host", host, "kept", "loopback", "sglang_server_host"))
    elif "--host" in flags and keyed:
        items.append(flag_item("--host", host, "kept", "a key guards it", "sglang_server_host"))
        todo.append(
            f"set sglang_server_firewall_cidrs to the networks of the clients of {host}:{port}: "
            "/health and /metrics answer without the key"
        )
    elif "--host" in flags:
        items.append(
            flag_item(
                "--host",
                host,
                "changed",
                f"{refusal}; or set sglang_server_host: 127.0.0.1 and put the router in front "
                "(docs/router.md); clients of the open port must then send the key",
                "sglang_server_host",
            )
        )
        todo.append(
            f"set sglang_server_api_key (Vault) and tell the clients of {host}:{port} to send "
            "it as 'Authorization: Bearer ...', and sglang_server_firewall_cidrs to their "
            "networks; or set sglang_server_host: 127.0.0.1 behind the router"
        )
    if keyed:
        items.append(
            flag_item(
                "--api-key",
                REDACTED,
                "changed",
                f"set through {RESERVED['--api-key']}; its value is not read from the host: set "
                "the same key there and clients keep working. The unit reads it from a "
                "root-only file on stdin, not from argv (which /proc shows every user)",
                "sglang_server_api_key",
            )
        )
        todo.append("set sglang_server_api_key (Vault) to the key the server uses now")
    if "--admin-api-key" in flags:
        items.append(
            flag_item(
                "--admin-api-key",
                REDACTED,
                "changed",
                f"set through {RESERVED['--admin-api-key']}",
                "sglang_server_rotate_admin_key",
            )
        )


# --------------------------------------------------------------------------------------
# the profile


def _model_key(model):
    return str(model).lower().rsplit("/", 1)[-1]


def closest_profile(library, model, tp, flags, gpu):
    """(name, doc) of the library profile nearest the server: the same model (else the same
    repository name), fitting these GPUs, the same TP, then the fewest differing flags;
    (None, {}) when no profile serves this model."""
    gpus = fit.measured(gpu)
    ranked = []
    for name, doc in library:
        exact = str(doc.get("model", "")).lower() == str(model).lower()
        if not exact and _model_key(doc.get("model", "")) != _model_key(model):
            continue
        fits = gpus is not None and fit.fit(doc, gpus)["ok"]
        pflags = doc.get("flags") or {}
        differ = sum(1 for f in set(pflags) | set(flags) if not same(pflags.get(f), flags.get(f)))
        ranked.append(
            ((not exact, not fits, str(doc.get("tp_size")) != str(tp), differ, name), name, doc)
        )
    if not ranked:
        return None, {}
    _, name, doc = min(ranked)
    return name, doc


def lock_pin(model, model_id, revision):
    """What the models lock records for a hub model the server serves from a branch: the
    branch it asked for (--revision, else main) and the commit the hub cache holds for it;
    {} for a sha (used as it is), a local path or a commit not found."""
    branch = str(model.get("revision") or "main")
    if model.get("kind") != "hub" or not revision or _SHA.fullmatch(branch):
        return {}
    return {"model": model_id, "branch": branch, "sha": revision}


def _revision(model):
    """The commit the hub cache holds for the server's revision (or main), or ""."""
    wanted = model.get("revision") or "main"
    if _SHA.fullmatch(str(wanted)) and wanted in model.get("revisions", []):
        return wanted
    ref = (model.get("refs") or {}).get(wanted)
    if ref:
        return ref
    revisions = model.get("revisions") or []
    return revisions[0] if len(revisions) == 1 else ""


# --------------------------------------------------------------------------------------
# the proposal


def differences(server, inventory, chosen, extra, settings):
    model = server.get("model") or {}
    out = [
        f"runs as {settings.get('service_name', 'sglang-server')}.service under the service "
        f"account {settings.get('service_user', 'gpuhost')}, not as {server.get('user')} "
        "under nohup; output goes to the journal",
        "the venv is gpuhost's, built from the lock of lane "
        f"{inventory.get('python_env_lane', settings.get('lane'))} (python_env), not "
        f"{server.get('venv') or 'the old one'}",
        "hardening: ProtectHome=yes hides home directories from the unit, so it cannot read "
        f"{model.get('hub_cache') or 'a cache under a home directory'}; the weights are loaded "
        "from the managed cache (model_cache_hf_home), linked or copied there without a new "
        "download by gpuhost adopt --apply (model_cache_adopt_from)",
        "health gate: a start counts only once /health answers and the known question is "
        "answered right; a failed gate rolls back",
        "keys: the client key reaches the server on stdin from a root-only file, and an admin "
        "key generated on the host guards the admin endpoints",
        "NCCL variables come from role nccl's decision for this topology (its env file), plus "
        "the overrides kept here",
    ]
    if not is_loopback(inventory.get("sglang_server_host", SGLANG_HOST)):
        out.append(
            "port rule: nftables admits only sglang_server_firewall_cidrs to port "
            f"{inventory.get('sglang_server_port', SERVER_PORT)}"
        )
    served = chosen.get("served_model_name")
    if served and served != inventory.get("sglang_server_served_model_name"):
        out.append(
            f"served name: kept as {inventory.get('sglang_server_served_model_name')} (what "
            f"clients send as model); the profile alone would serve it as {served}"
        )
    for flag, value in sorted((chosen.get("flags") or {}).items()):
        if flag not in extra.get("flags", {}) and flag not in settings.get("_seen_flags", ()):
            out.append(f"the profile also sets {flag} {value}")
    out.append(
        "adopt changes nothing: the old process keeps running; gpuhost adopt --apply cuts over "
        "(docs/adopt.md)"
    )
    return out


class AdoptError(ValueError):
    """The proposal cannot be made from this input; the message says what is missing."""


def propose(server, gpu, host, library, catalogues, locks, settings=None):
    """The proposal for one discovered server (see the module docstring).

    library: [(name, profile doc)]; catalogues: {sglang version: argument catalogue}, the one
    of the lane the managed server will run is used; locks: {lane: {package: version}};
    settings: {lane (the inventory's python_env_lane), nccl_version, service_name,
    service_user}.
    """
    settings = dict(settings or {})
    lane, sglang_item = lane_for(server.get("versions"), locks, settings.get("lane", "cu128"))
    pinned = (locks.get(lane) or {}).get("sglang")
    if pinned not in catalogues:
        raise AdoptError(
            f"python_env_lane: lane {lane!r} pins sglang {pinned}, and there is no argument "
            f"catalogue for it (catalogues: {', '.join(sorted(catalogues)) or 'none'}); "
            "allowed: a lane of locks/ whose catalogue is in data/sglang/"
        )
    cat = profile.as_catalogue(catalogues[pinned])
    items = [sglang_item, *package_items(server.get("versions"), locks.get(lane))]
    inp = nccl.input_from_facts(gpu, host, settings.get("nccl_version"))
    try:
        decision = {**nccl.decide(inp), "input": inp}
    except nccl.NcclInputError as exc:
        raise AdoptError(str(exc)) from exc
    version = nccl.parse_version(settings.get("nccl_version"))

    flags = _Flags(cat, decision)
    given = {}
    for name, value in server.get("flags") or []:
        given[name] = value
    listen_flags = {}
    for name, value in given.items():
        held = flags.add(name, value)
        if held:
            listen_flags[held] = (name, value)
    todo = []
    # The lane only where a lock pins the server's sglang; else the inventory's stays (the
    # sglang item says which version that is).
    inventory = {**({"python_env_lane": lane} if sglang_item["status"] == "kept" else {})}
    inventory.update(flags.inventory)
    listen(listen_flags, cat, flags.items, inventory, todo)

    model = server.get("model") or {}
    model_id = inventory.get("sglang_server_model_id") or model.get("id", "")
    inventory["sglang_server_model_id"] = model_id
    # SGLang serves the model path as its name unless told; clients send that name.
    inventory.setdefault("sglang_server_served_model_name", model_id)
    tp = inventory.setdefault("sglang_server_tp_size", 1)
    # The port clients use now, even where it is SGLang's default and the fleet's differs.
    inventory.setdefault("sglang_server_port", SERVER_PORT)
    revision = _revision(model) if model.get("kind") == "hub" else ""
    if revision:
        inventory["sglang_server_revision"] = revision
    if model.get("kind") == "local":
        todo.append(
            f"the weights at {model_id}: the unit cannot read a home directory (ProtectHome=yes); "
            "put them outside one and set model_cache_mode: prestaged with "
            "model_cache_prestaged_path (and sglang_server_model_id) to that path"
        )

    name, chosen = closest_profile(library, model_id, tp, flags.profile_flags, gpu)
    # The server's own flags, judged by the profile validator on this host: inert flags and
    # the KV cache rule (each message is about the first flag it names).
    checked = profile.validate(
        {
            "model": model_id,
            "revision": revision or "main",
            "tp_size": tp,
            "dsa": chosen.get("dsa"),
            "flags": dict(flags.profile_flags),
            "env": {},
        },
        cat,
        gpu=gpu,
        listen={"host": SGLANG_HOST},
    )
    judged = {}
    for message in checked["errors"] + checked["warnings"]:
        subject = _subject(message)
        if subject in flags.profile_flags and subject not in judged:
            judged[subject] = message
    extra_flags = {}
    for flag, value in flags.profile_flags.items():
        mine = chosen.get("flags", {}).get(flag)
        if flag in judged and mine is not None and not same(mine, value):
            flags.items.append(item("flag", flag, given[flag], "changed", judged[flag], mine))
        elif flag in judged and not judged[flag].startswith(f"{flag} is deprecated"):
            flags.items.append(item("flag", flag, given[flag], "dropped", judged[flag]))
        elif mine is not None and same(mine, value):
            flags.items.append(item("flag", flag, given[flag], "kept", f"profile {name} sets it"))
        else:
            extra_flags[flag] = value
            flags.items.append(
                item(
                    "flag", flag, given[flag], "kept",
                    judged.get(flag, "kept in sglang_server_flags"), "sglang_server_flags",
                )
            )  # fmt: skip

    env_items, overrides, extra_env = [], {}, {}
    for var, value in sorted((server.get("env") or {}).items()):
        if var.startswith("NCCL_"):
            got, keep = nccl_item(var, value, decision, version)
            if keep is not None:
                overrides[var] = keep
        else:
            got, keep = env_item(var, value, chosen.get("env") or {})
            if keep is not None:
                extra_env[var] = keep
        env_items.append(got)
    if overrides:
        inventory["nccl_env_overrides"] = overrides
    if extra_flags:
        inventory["sglang_server_flags"] = extra_flags
    if extra_env:
        inventory["sglang_server_extra_env"] = extra_env
    inventory["sglang_server_profile"] = name or ""
    all_items = items + flags.items + env_items
    settings["_seen_flags"] = set(flags.profile_flags)
    return {
        "pid": server.get("pid"),
        "user": server.get("user"),
        "model": model_id,
        "profile": name or "",
        "sglang_version": cat.version,
        "inventory": dict(sorted(inventory.items())),
        "items": all_items,
        "counts": {s: sum(1 for i in all_items if i["status"] == s) for s in STATUSES},
        "todo": todo,
        # What the module could not read (a link not followed, a file too large): the
        # proposal is made without it.
        "not_read": list(server.get("problems") or []) + list(model.get("problems") or []),
        "differences": differences(server, inventory, chosen, {"flags": extra_flags}, settings),
        # For the models lock, after a cutover (gpuhost adopt --apply): model -> branch -> sha.
        "lock_pin": lock_pin(model, model_id, revision),
    }
