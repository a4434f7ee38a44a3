# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: validate every user-facing variable of every role before any change.

Runs on the controller (no module is sent to the host): it reads roles/*/meta/
argument_specs.yml and roles/*/meta/constraints.yml, templates the values the inventory
defines, and fails with one line per bad variable. playbooks/validate.yml runs it for all
roles first in every playbook; a role's tasks/preflight.yml runs it for that role alone
(`roles: [<role>]`), so a role used on its own checks its settings the same way. The logic lives in
plugins/plugin_utils/gpuhost_validate.py (unit-tested in tests/test_validate.py).
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleError, AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase

try:  # ansible-core 2.19+: vaulted values are EncryptedString or tagged VaultedValue
    from ansible.parsing.vault import VaultHelper

    def _vaulted(value):
        return VaultHelper.get_ciphertext(value, with_tags=False) is not None

except ImportError:  # older ansible-core
    from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode

    def _vaulted(value):
        return isinstance(value, AnsibleVaultEncryptedUnicode)


DOCUMENTATION = r"""
---
action: gpuhost.gpu.validate
short_description: Validate all gpuhost role variables against argument specs and constraints
options:
  roles_dir:
    description: Directory holding the roles whose meta/argument_specs.yml are read.
    type: path
    default: roles/ beside this plugin's repository
  roles:
    description: Check only the variables these roles read (their argument specs and the
      constraints on those variables); empty checks every role's.
    type: list
    elements: str
    default: []
"""

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate as logic  # noqa: E402 - after the doc blocks

_REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Shared settings: defined once, here, and loaded by every playbook as its group_vars
# (docs/ARCHITECTURE.md "Settings"); a role's defaults do not repeat them.
_SHARED_DIR = os.path.join(_REPO, "group_vars", "all")


# libyaml's safe loader where PyYAML has it (~7x faster): every playbook validates all roles'
# specs, and each role validates its own again (issue 29 item 6, a cheap no-op).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_SAFE_LOADER)


def _missing_shared(task_vars):
    """One error per shared setting the play does not define: its playbook did not load
    group_vars/all (a playbook of the user's own that applies the roles)."""
    errors = []
    for filename in sorted(os.listdir(_SHARED_DIR)) if os.path.isdir(_SHARED_DIR) else []:
        if not filename.endswith(".yml"):
            continue
        for name in _load_yaml(os.path.join(_SHARED_DIR, filename)) or {}:
            if name not in task_vars:
                errors.append(
                    f"{name}: not defined; allowed: a value. It is a shared setting, defined "
                    f"once in group_vars/all/{filename} of gpuhost.gpu: a playbook of your own "
                    "that applies its roles must load that folder as its group_vars (a link "
                    f"beside the playbook), or set {name}"
                )
    return errors


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        roles_dir = args.get("roles_dir") or os.path.join(_REPO, "roles")
        try:
            specs = logic.load_role_specs(roles_dir, _load_yaml)
            constraints = logic.load_role_constraints(roles_dir, _load_yaml)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise AnsibleError(f"gpuhost_validate: cannot read the specs: {exc}") from exc
        only = [str(r) for r in args.get("roles") or []]
        if only:
            unknown = sorted(set(only) - set(specs))
            if unknown:
                raise AnsibleError(f"gpuhost_validate: roles {unknown} have no argument specs")
            specs, constraints = logic.select(specs, constraints, only)

        names = set()
        for options in specs.values():
            names.update(options)
        names.update((constraints.get("variables") or {}).keys())
        for rule in constraints.get("rules") or []:
            names.update(logic.rule_names(rule))
        # Candidates for the typo check: anything that looks like a role's variable, except a
        # role's output cached as a fact by an earlier run (verify_server_installed): a fact is
        # not a setting.
        prefixes = tuple(f"{role}_" for role in specs)
        facts = task_vars.get("ansible_facts") or {}
        names.update(
            n for n in task_vars if isinstance(n, str) and n.startswith(prefixes) and n not in facts
        )

        # The project's own roles read the shared settings; a test's roles_dir need not.
        values, errors = {}, ([] if args.get("roles_dir") else _missing_shared(task_vars))
        for name in sorted(names):
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleUndefinedVariable as exc:
                # e.g. a template over facts not gathered yet: its role checks it later.
                self._display.warning(
                    f"gpuhost_validate: {name} not checked here, its template needs a "
                    f"variable that is not defined yet ({exc.message})"
                )
            except Exception as exc:  # any other templating failure is a bad user value
                errors.append(
                    f"{name}: got a template that does not render ({exc}); "
                    "allowed: a value or a template over defined variables"
                )
        # Secrets as the inventory holds them, before templating decrypts or looks them up.
        raw = {n: task_vars[n] for n in logic.secret_names(specs) if n in task_vars}
        for line in logic.plain_text_secrets(raw, _vaulted):
            self._display.warning(f"gpuhost_validate: {line}")
        extra_env = task_vars.get("sglang_server_extra_env")
        if isinstance(extra_env, dict):
            for line in logic.plain_text_env_secrets(extra_env, _vaulted):
                self._display.warning(f"gpuhost_validate: {line}")
        found, warnings, checked = logic.validate(
            specs, constraints, values, defaults=logic.plain_defaults(specs)
        )
        errors.extend(found)
        for line in warnings:
            self._display.warning(f"gpuhost_validate: {line}")

        result["changed"] = False
        if errors:
            result["failed"] = True
            result["errors"] = errors
            result["msg"] = f"{len(errors)} invalid setting(s), nothing was changed:\n" + "\n".join(
                errors
            )
        else:
            result["checked"] = checked
            result["msg"] = f"{len(checked)} setting(s) valid"
        return result
