# Copyright: gpuhost contributors
# Apache-2.0
"""One place that validates every user-facing variable of every role, before any change.

Inputs: each role's meta/argument_specs.yml (types, choices, list elements, sub-options: the
file ansible-core checks at role entry, and checked here by ansible-core's own
ArgumentSpecValidator) plus each role's meta/constraints.yml (what argument specs cannot say:
ranges, patterns, non-empty, and rules across variables such as TP size against the GPU
count). Output: error lines of the form
  <variable>: got <value>; allowed: <what is allowed> (<where the rule comes from>)
so a user can fix the inventory from the message alone. docs/validation.md describes the
constraint keys.

Pure: values in, messages out. The action plugin gpuhost.gpu.validate feeds it task vars;
tests feed it dicts.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS
from ansible.module_utils.errors import ArgumentValueError, ElementError, UnsupportedError
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_secrets
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import is_loopback
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import is_secret_name
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_flags import (
    RESERVED as RESERVED_FLAGS,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_render import (
    control_characters,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_router_args import (
    check as argv_problem,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_tp import tp_misfit

_MISSING = object()
CONSTRAINTS_FILE = os.path.join("meta", "constraints.yml")


class Invalid(Exception):
    """A value that does not fit; the text says what was expected."""


# --------------------------------------------------------------------------------------
# loading


def load_role_specs(roles_dir, load_yaml):
    """{role: {variable: spec}} from roles/*/meta/argument_specs.yml (entry point main).

    Every role directory is read, so a role added later is covered without touching this
    code. `load_yaml(path)` is injected to keep this module free of a YAML dependency.
    """
    specs = {}
    for role in sorted(os.listdir(roles_dir)):
        path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if not os.path.isfile(path):
            continue
        data = load_yaml(path) or {}
        entry = (data.get("argument_specs") or {}).get("main") or {}
        specs[role] = entry.get("options") or {}
    return specs


def load_role_constraints(roles_dir, load_yaml):
    """Every role's meta/constraints.yml merged into {variables, rules}.

    Each variable entry and rule carries `source` (roles/<role>/meta/constraints.yml) for the
    messages. A variable constrained by two roles is an error in the files, not a merge.
    """
    merged = {"variables": {}, "rules": []}
    for role in sorted(os.listdir(roles_dir)):
        path = os.path.join(roles_dir, role, CONSTRAINTS_FILE)
        if not os.path.isfile(path):
            continue
        source = f"roles/{role}/{CONSTRAINTS_FILE}"
        data = load_yaml(path) or {}
        for name, rule in (data.get("variables") or {}).items():
            if name in merged["variables"]:
                raise ValueError(
                    f"{source}: {name} is also constrained in {merged['variables'][name]['source']}"
                )
            merged["variables"][name] = {**(rule or {}), "source": source, "role": role}
        for rule in data.get("rules") or []:
            merged["rules"].append({**rule, "source": source, "role": role})
    return merged


def rule_names(rule):
    """The variables a cross-variable rule reads."""
    names = [rule[k] for k in ("left", "right", "if", "then", "by", "count", "unless") if k in rule]
    return names + list(rule.get("vars") or [])


def select(specs, constraints, roles):
    """specs and constraints limited to what roles `roles` read (a role checking itself).

    A variable declared by one of these roles keeps the constraints another role's file gives
    it (the shared gpuhost_* settings are constrained once, by role base); a rule applies when
    every variable it reads is one of them.
    """
    roles = set(roles)
    specs = {r: o for r, o in specs.items() if r in roles}
    names = {n for options in specs.values() for n in options}
    variables = constraints.get("variables") or {}
    names |= {n for n, rule in variables.items() if rule.get("role") in roles}
    return specs, {
        "variables": {n: rule for n, rule in variables.items() if n in names},
        "rules": [r for r in constraints.get("rules") or [] if set(rule_names(r)) <= names],
    }


# --------------------------------------------------------------------------------------
# type checks: ansible-core's own (the ArgumentSpecValidator that checks a role's arguments
# at its entry), after a guard against the conversions it makes that a setting must not get
# (a bool taken as an int, a list or null turned into a string, "a,b" split into a list,
# "k=v" parsed into a mapping, nan as a number).


def _is_secret(name, sources):
    """Whether an error message must hide the value: the spec says no_log, or the name is a
    secret's by the project's one list (gpuhost_secrets); a count typed as a number
    (`verify_max_tokens`) is not a credential."""
    if any(spec.get("no_log") for _, spec in sources):
        return True
    if not is_secret_name(name):
        return False
    return not any(spec.get("type") in ("int", "float") for _, spec in sources)


def _describe(value, secret=False):
    if secret:
        return "<hidden>" if value not in (None, "", [], {}) else _describe(value)
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(kind):
    return {
        "str": "a string",
        "path": "a path string",
        "int": "an integer",
        "float": "a number",
        "bool": "a boolean (true/false)",
        "list": "a list",
        "dict": "a mapping",
    }.get(kind, kind)


def _guard(value, kind):
    """Raise Invalid where ansible-core would convert a value no user means."""
    if kind in (None, "raw", "jsonarg", "json"):
        return
    if value is None:
        raise Invalid(_type_name(kind))
    if kind in ("str", "path") and not isinstance(value, (str, int, float)):
        raise Invalid(_type_name(kind))
    if kind in ("str", "path") and isinstance(value, bool):
        raise Invalid(_type_name(kind))
    if kind in ("int", "float") and isinstance(value, bool):
        raise Invalid(_type_name(kind))
    if kind == "bool" and not isinstance(value, (bool, str, int)):
        raise Invalid(_type_name(kind))
    if kind == "list" and not isinstance(value, (list, tuple)):
        raise Invalid(_type_name(kind))
    if kind == "dict" and not isinstance(value, dict):
        raise Invalid(_type_name(kind))


def convert(value, kind):
    """Return value converted to `kind` by ansible-core's type check, or raise Invalid."""
    _guard(value, kind)
    checker = DEFAULT_TYPE_VALIDATORS.get(kind) if kind else None
    if checker is None:
        return value
    try:
        result = checker(value)
    except (TypeError, ValueError) as exc:
        raise Invalid(_type_name(kind)) from exc
    if kind == "float" and (math.isnan(result) or math.isinf(result)):
        raise Invalid("a finite number")
    return result


_SPEC_KEYS = ("type", "elements", "choices", "options")


def _check_spec(value, spec):
    """Type, elements, choices and sub-options from an argument spec, checked by
    ansible-core's ArgumentSpecValidator; returns the converted value."""
    kind = spec.get("type", "str")
    _guard(value, kind)
    if kind == "list" and spec.get("elements"):
        for item in value:
            try:
                _guard(item, spec["elements"])
            except Invalid as exc:
                raise Invalid(f"a list of {exc}") from exc
    if kind == "float" and not isinstance(value, (list, dict)):
        convert(value, kind)  # nan and inf: ansible-core takes them
    wanted = {k: spec[k] for k in _SPEC_KEYS if k in spec}
    result = ArgumentSpecValidator({"value": wanted}).validate({"value": value})
    for error in result.errors:
        if isinstance(error, ArgumentValueError) and spec.get("choices") is not None:
            shown = ", ".join(repr(c) if c == "" else str(c) for c in spec["choices"])
            raise Invalid(f"one of {shown}" + (" (each item)" if kind == "list" else ""))
        if isinstance(error, ElementError):
            raise Invalid(f"a list of {_type_name(spec.get('elements'))}")
        if spec.get("options") and isinstance(value, dict):
            keys = ", ".join(sorted(spec["options"]))
            detail = "" if isinstance(error, UnsupportedError) else f" ({error.error_message})"
            raise Invalid(f"a mapping with keys from {keys}{detail}")
        raise Invalid(_type_name(kind))
    return result.validated_parameters["value"]


# --------------------------------------------------------------------------------------
# constraints


def _check_constraint(value, rule):
    """Raise Invalid with the allowed range/shape when value breaks a constraint entry."""
    if rule.get("no_control"):
        # Rendered into a unit, env file, nftables rule or launcher: a newline there is a
        # new directive. Checked first, whatever the other rules say.
        bad = control_characters(value)
        if bad:
            raise Invalid(
                f"text without control characters (found {', '.join(bad)}): it is written "
                "into a systemd unit, env file, firewall rule or launcher"
            )
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    bounds = []
    if "min" in rule:
        bounds.append(f">= {rule['min']}")
    if "gt" in rule:
        bounds.append(f"> {rule['gt']}")
    if "max" in rule:
        bounds.append(f"<= {rule['max']}")
    if "lt" in rule:
        bounds.append(f"< {rule['lt']}")
    if bounds and number:
        ok = (
            ("min" not in rule or value >= rule["min"])
            and ("gt" not in rule or value > rule["gt"])
            and ("max" not in rule or value <= rule["max"])
            and ("lt" not in rule or value < rule["lt"])
        )
        if not ok:
            raise Invalid(rule.get("message") or "a number " + " and ".join(bounds))
    if rule.get("nonempty") and (value is None or (hasattr(value, "__len__") and not value)):
        raise Invalid(rule.get("message") or "a non-empty value")
    # A raw-typed setting given as a number (rolling_update_serial: 0) is matched as text.
    scalar = value is not None and not isinstance(value, (bool, list, dict))
    if "pattern" in rule and scalar and not re.fullmatch(rule["pattern"], str(value)):
        raise Invalid(rule.get("message") or f"a string matching {rule['pattern']}")
    if "ip" in rule and isinstance(value, (str, int)) and not isinstance(value, bool):
        _check_ip(str(value), rule["ip"])
    if "argv" in rule and value not in (None, "", {}):
        # Words of sglang-router's command line (gpuhost_router_args): no option smuggled in.
        problem = argv_problem(rule["argv"], value)
        if problem:
            raise Invalid(problem)
    if "min_length" in rule and hasattr(value, "__len__") and len(value) < rule["min_length"]:
        raise Invalid(rule.get("message") or f"at least {rule['min_length']} item(s)")
    if "elements" in rule and isinstance(value, list):
        for item in value:
            _check_constraint(item, rule["elements"])
    if "key_pattern" in rule and isinstance(value, dict):
        # Open mappings (e.g. nccl_env_overrides) take only keys of one shape.
        for key in value:
            if not re.fullmatch(rule["key_pattern"], str(key)):
                raise Invalid(
                    f"key {key!r} is not allowed: "
                    + (rule.get("message") or f"keys must match {rule['key_pattern']}")
                )
    if "values" in rule and isinstance(value, dict):
        # The same rule for every value of an open mapping (cuda_repo_keyring_sha256).
        for key, item in value.items():
            try:
                _check_constraint(item, rule["values"])
            except Invalid as exc:
                raise Invalid(f"{key!r} {exc}") from exc
    if rule.get("reserved_flags") and isinstance(value, dict):
        # SGLang flags that have a variable of their own (gpuhost_profile_flags.RESERVED):
        # refused here for every entry playbook, before the profile check reads the rest.
        for key in value:
            if key in RESERVED_FLAGS:
                raise Invalid(f"no {key} (it is set through {RESERVED_FLAGS[key]})")
    if "keys" in rule and isinstance(value, dict):
        # Per-key rules for a mapping (e.g. one SGLang flag inside sglang_server_flags); a
        # key that is absent, or null (which removes it), is not checked.
        for key, sub in rule["keys"].items():
            if value.get(key) is None:
                continue
            try:
                item = convert(value[key], sub["type"]) if "type" in sub else value[key]
                _check_constraint(item, sub)
            except Invalid as exc:
                raise Invalid(f"{key!r} {exc}") from exc


def _check_ip(text, kind):
    """ip: address (an IP address, or localhost) | network (a CIDR, host bits allowed),
    parsed by the standard library rather than matched by a pattern."""
    try:
        if kind == "network":
            ipaddress.ip_network(text, strict=False)
        elif text != "localhost":
            ipaddress.ip_address(text)
    except ValueError as exc:
        shown = "an IPv4/IPv6 network in CIDR form, e.g. 10.0.0.0/8 or fd00::/8"
        if kind != "network":
            shown = "an IPv4/IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1) or localhost"
        raise Invalid(f"{shown} ({exc})") from exc


def secret_names(specs):
    """Variables whose argument spec says no_log: the secrets."""
    return sorted(
        {n for o in specs.values() for n, spec in o.items() if (spec or {}).get("no_log")}
    )


def plain_text_secrets(raw, vaulted):
    """Warnings for secrets written into the inventory as plain text.

    raw: {name: the value as the inventory holds it, before templating}; vaulted(value):
    whether that value is Ansible Vault ciphertext. A template ("{{ vault_x }}", an env
    lookup) or an empty value is fine; a literal non-empty string sits readable in a file.
    """
    out = []
    for name in sorted(raw):
        value = raw[name]
        if vaulted(value) or not isinstance(value, str) or not value or "{{" in value:
            continue
        out.append(
            f"{name}: set as plain text in the inventory or extra vars; keep it in Ansible Vault "
            "(ansible-vault encrypt_string) or take it from the environment "
            "(lookup('ansible.builtin.env', ...))"
        )
    return out


def plain_text_env_secrets(env, vaulted, where="sglang_server_extra_env"):
    """Warnings for secret-named variables (gpuhost_secrets) set as plain text in the server's
    environment (`where`: sglang_server_extra_env or a profile's env). The server may read
    them (that is what they are for); they are stored in its env file on the host (root,
    0600) and redacted by name in the run record, but the plain text sits in the inventory."""
    out = []
    for name in sorted(env or {}):
        value = env[name]
        if not gpuhost_secrets.is_secret_name(name) or vaulted(value):
            continue
        if not isinstance(value, str) or not value or "{{" in value:
            continue
        out.append(
            f"{where}: {name} is set as plain text; the server reads it from its env file "
            "(root, 0600) and the run record redacts it by name, but keep the value in "
            "Ansible Vault ({{ vault_x }}) or the environment (lookup('ansible.builtin.env', ...))"
        )
    return out


def plain_defaults(specs):
    """{name: default} of every argument spec whose default is a plain value (no template):
    what the rules across variables read for a variable the inventory leaves unset."""
    out = {}
    for options in specs.values():
        for name, spec in options.items():
            default = (spec or {}).get("default", _MISSING)
            if default is _MISSING or (isinstance(default, str) and "{{" in default):
                continue
            out.setdefault(name, default)
    return out


def validate(specs, constraints, values, defaults=None):
    """Validate `values` ({name: value}, only variables the user defined).

    specs: {role: {name: argument spec}}; constraints: {variables, rules} as
    load_role_constraints() returns them.
    defaults: {name: value} the rules across variables read for a variable not in values
    (plain_defaults(specs)); the variables themselves are checked only when set.
    Returns (errors, warnings, checked) with errors/warnings as message lines.
    """
    errors, warnings = [], []
    converted = {}
    declared = {}
    for role, options in specs.items():
        for name, spec in options.items():
            declared.setdefault(name, []).append((role, spec or {}))
    extra = (constraints or {}).get("variables") or {}

    for name in sorted(set(declared) | set(extra)):
        value = values.get(name, _MISSING)
        sources = declared.get(name, [])
        if value is _MISSING:
            for role, spec in sources:
                if spec.get("required") and "default" not in spec:
                    errors.append(f"{name}: not set; allowed: required by role {role}")
                    break
            continue
        rule = extra.get(name) or {}
        where = _source(rule)
        try:
            current = value
            for role, spec in sources:
                where = f"role {role} argument_specs"
                current = _check_spec(value, spec)
            if "type" in rule and not sources:
                current = _check_spec(value, {"type": rule["type"], **_spec_keys(rule)})
            if rule:
                where = _source(rule)
                if value is None and not rule.get("nonempty"):
                    raise Invalid(_type_name(rule.get("type", "a value")))
                _check_constraint(current, rule)
            converted[name] = current
        except Invalid as exc:
            secret = _is_secret(name, sources)
            errors.append(f"{name}: got {_describe(value, secret)}; allowed: {exc} ({where})")

    rule_values, rule_converted = dict(values), dict(converted)
    for name, value in (defaults or {}).items():
        if name in values:
            continue
        rule_values[name] = value
        try:
            for _, spec in declared.get(name, []):
                value = _check_spec(value, spec)
            rule_converted[name] = value
        except Invalid:
            continue
    for rule in (constraints or {}).get("rules") or []:
        message = _check_rule(rule, rule_converted, rule_values)
        if message:
            errors.append(message)

    warnings.extend(_unknown_names(values, declared, extra, specs))
    return errors, warnings, sorted(converted)


def _spec_keys(rule):
    return {k: rule[k] for k in ("elements", "choices") if k in rule}


# --------------------------------------------------------------------------------------
# rules across variables


def _number(name, converted, values):
    value = converted.get(name, values.get(name, _MISSING))
    if value is _MISSING:
        return _MISSING
    try:
        return convert(value, "int")
    except Invalid:
        return None


def _check_rule(rule, converted, values):
    """Cross-variable rules; a rule whose variables are not all set does not apply."""
    kind = rule.get("kind")
    if kind in ("divides", "le"):
        left, right = rule["left"], rule["right"]
        a, b = _number(left, converted, values), _number(right, converted, values)
        if a is _MISSING or b is _MISSING or a is None or b is None:
            return None  # unset, or a type error already reported for that variable
        if rule.get("ignore_zero") and 0 in (a, b):
            return None
        if kind == "le" and a > b:
            return (
                f"{left}: got {a}; allowed: at most {right} ({b})"
                f"{_why(rule)} ({_source(rule)} rule {rule.get('name', kind)})"
            )
        if kind == "divides" and (b % a != 0 if a else True):
            divisors = [d for d in range(1, b + 1) if b % d == 0] if b > 0 else []
            shown = ", ".join(str(d) for d in divisors) or "none"
            return (
                f"{left}: got {a}; allowed: a divisor of {right} ({b}): {shown}"
                f"{_why(rule)} ({_source(rule)} rule {rule.get('name', kind)})"
            )
        return None
    if kind == "requires":
        trigger, needed = rule["if"], rule["then"]
        if trigger not in values or needed not in values:
            return None
        trigger_value = converted.get(trigger, values[trigger])
        unless = rule.get("unless_in", [])
        if not trigger_value or trigger_value in unless:
            return None
        if rule.get("unless_loopback") and is_loopback(trigger_value):
            return None
        needed_value = values.get(needed)
        if needed_value in (None, "", [], {}):
            return (
                f"{needed}: got {_describe(needed_value, True)}; allowed: a non-empty value when "
                f"{trigger} is {_describe(trigger_value)}{_why(rule)} "
                f"({_source(rule)} rule {rule.get('name', kind)})"
            )
        return None
    if kind == "any_set":
        names = rule["vars"]
        if not all(n in values for n in names):
            return None
        if any(values[n] not in (None, "", [], {}) for n in names):
            return None
        return (
            f"{names[-1]}: got {_describe(values[names[-1]])}; allowed: a non-empty value, since "
            + ", ".join(f"{n} is {_describe(values[n])}" for n in names[:-1])
            + f"{_why(rule)} ({_source(rule)} rule {rule.get('name', kind)})"
        )
    if kind == "tp_fits":
        # One rule for every TP setting against the GPU count (gpuhost_tp, shared with the
        # preflight check of the GPUs found).
        count = _number(rule["count"], converted, values)
        if count in (_MISSING, None):
            return None
        for name in rule["vars"]:
            tp = _number(name, converted, values)
            if tp in (_MISSING, None):
                continue
            message = tp_misfit(name, tp, count, rule["count"])
            if message:
                return f"{message} ({_source(rule)} rule {rule.get('name', kind)})"
        return None
    if kind == "prefix":
        # One version inside another: nvidia_driver_version inside nvidia_driver_branch.
        left, right = rule["left"], rule["right"]
        if left not in converted or right not in converted:
            return None
        a, b = str(converted[left]), str(converted[right])
        if a == "" or b == "" or a.startswith(b + "."):
            return None
        return (
            f"{left}: got {_describe(converted[left])}; allowed: a version inside {right} ({b}), "
            f"i.e. {b}.<n>{_why(rule)} ({_source(rule)} rule {rule.get('name', kind)})"
        )
    if kind == "differs":
        left, right = rule["left"], rule["right"]
        if left not in converted or right not in converted:
            return None
        if converted[left] != converted[right]:
            return None
        return (
            f"{left}: got {_describe(converted[left])}; allowed: a value other than {right}'s "
            f"({_describe(converted[right])}){_why(rule)} "
            f"({_source(rule)} rule {rule.get('name', kind)})"
        )
    if kind == "min_by":
        # A version at least what another setting needs: cuda_toolkit_version for the lane.
        left, by = rule["left"], rule["by"]
        if left not in converted or by not in converted:
            return None
        wanted = (rule.get("min") or {}).get(str(converted[by]))
        have = _version(converted[left])
        if wanted is None or have is None or have >= _version(wanted):
            return None
        return (
            f"{left}: got {_describe(converted[left])}; allowed: {wanted} or newer for "
            f"{by} {converted[by]}{_why(rule)} ({_source(rule)} rule {rule.get('name', kind)})"
        )
    if kind == "scheme":
        # A URL whose scheme is one of `schemes`, unless the (test-only) switch `unless` is
        # true: cuda_repo_base_url is https:// outside tests.
        left, unless = rule["left"], rule.get("unless")
        if left not in converted:
            return None
        value = str(converted[left])
        scheme = value.split("://", 1)[0].lower() if "://" in value else ""
        allowed = [str(s).lower() for s in rule.get("schemes") or []]
        if scheme in allowed or (unless and converted.get(unless) is True):
            return None
        shown = " or ".join(f"{s}://" for s in allowed)
        switch = f" ({unless}: true allows others, for tests only)" if unless else ""
        return (
            f"{left}: got {_describe(value)}; allowed: a {shown} URL{switch}{_why(rule)} "
            f"({_source(rule)} rule {rule.get('name', kind)})"
        )
    return f"{_source(rule)}: rule {rule.get('name', '?')} has unknown kind {kind!r}"


def _version(value):
    parts = re.findall(r"\d+", str(value))
    return tuple(int(p) for p in parts) if parts else None


def _source(rule):
    return rule.get("source") or "constraints"


def _why(rule):
    return f" - {rule['why']}" if rule.get("why") else ""


def _unknown_names(values, declared, extra, specs):
    """A variable that starts like a role's variables but is declared nowhere is probably
    a typo, and a typo silently leaves the default in force: say so, with the near names."""
    known = set(declared) | set(extra)
    prefixes = tuple(f"{role}_" for role in specs if role not in ("base",))
    out = []
    for name in sorted(values):
        if name in known or name.startswith("_") or not name.startswith(prefixes):
            continue
        near = difflib.get_close_matches(name, known, n=2, cutoff=0.8)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        out.append(f"{name}: not declared by any role's argument_specs{hint}")
    return out
