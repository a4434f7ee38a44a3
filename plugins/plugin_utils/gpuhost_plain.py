# Copyright: gpuhost contributors
# Apache-2.0
"""Plain Python values from what Ansible hands a controller plugin.

ansible-core 2.19 gives filters and action plugins lazy, tagged containers and scalars
(_AnsibleLazyTemplateDict, _AnsibleTaggedStr, _AnsibleTaggedInt, _AnsibleTaggedDate, ...).
The pure module_utils want plain ones: their results are compared, copied into facts and
written to JSON, and a tagged value must not leak through them. Used by the filter and
action plugins before they call into plugins/module_utils or plugins/plugin_utils; pure,
stdlib only.
"""

from __future__ import annotations


def plain(value):
    """A copy of value made of plain dict/list/str/int/float/bool/None.

    dicts become dicts with str keys and lists and tuples become lists, recursively; bool and
    None stay as they are; int and float (tagged or other subclasses) become int and float;
    anything else, a str subclass or a date included, becomes its str().
    """
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)
