#!/usr/bin/env python3
# Copyright: gpuhost contributors
# Apache-2.0
"""Copy the facts gpuhost needs out of Proxmox VE's API schema (apidata.js).

Usage: tools/pve_schema_facts.py PATH/TO/apidata.js > data/proxmox/pve-api-<version>.json

apidata.js is `api-viewer/apidata.js` of the public proxmox/pve-docs repository (see
data/proxmox/SOURCE.md). Only the paths and methods the proxmox_vm role, the host checks
and the API stand-in use are kept, and of each parameter only what a request is checked
against: type, format, enum, pattern, range, optional, typetext. Descriptions are dropped.
"""

from __future__ import annotations

import json
import sys

VERSION = "9.1.3"

PATHS = {
    "/version": ["GET"],
    "/access/ticket": ["POST"],
    "/nodes": ["GET"],
    "/cluster/nextid": ["GET"],
    "/cluster/resources": ["GET"],
    "/cluster/mapping/pci": ["GET"],
    "/cluster/mapping/pci/{id}": ["GET"],
    "/nodes/{node}/qemu": ["GET", "POST"],
    "/nodes/{node}/qemu/{vmid}": ["DELETE"],
    "/nodes/{node}/qemu/{vmid}/config": ["GET", "POST", "PUT"],
    "/nodes/{node}/qemu/{vmid}/status/current": ["GET"],
    "/nodes/{node}/qemu/{vmid}/status/start": ["POST"],
    "/nodes/{node}/qemu/{vmid}/status/stop": ["POST"],
    "/nodes/{node}/qemu/{vmid}/status/shutdown": ["POST"],
    "/nodes/{node}/qemu/{vmid}/clone": ["POST"],
    "/nodes/{node}/qemu/{vmid}/resize": ["PUT"],
    "/nodes/{node}/qemu/{vmid}/unlink": ["PUT"],
    "/nodes/{node}/qemu/{vmid}/move_disk": ["POST"],
    "/nodes/{node}/tasks/{upid}/status": ["GET"],
    "/nodes/{node}/tasks/{upid}/log": ["GET"],
}

_KEEP = (
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "optional",
    "default_key",
    "alias",
    "keyAlias",
    "typetext",
    "default",
)


def _prop(spec):
    out = {}
    for key in _KEEP:
        if key not in spec:
            continue
        value = spec[key]
        if key == "format" and isinstance(value, dict):
            value = {name: _prop(sub) for name, sub in sorted(value.items())}
        out[key] = value
    return out


def load(path):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    data, _ = json.JSONDecoder().raw_decode(text[text.index("[") :])
    index = {}

    def walk(node):
        index[node["path"]] = node
        for child in node.get("children", []):
            walk(child)

    for node in data:
        walk(node)
    return index


def facts(index):
    paths = {}
    for path, methods in PATHS.items():
        info = index[path]["info"]
        paths[path] = {}
        for method in methods:
            call = info[method]
            params = call.get("parameters", {}).get("properties", {})
            paths[path][method] = {
                "name": call.get("name"),
                "allowtoken": call.get("allowtoken", 1),
                "permissions": call.get("permissions", {}),
                "parameters": {name: _prop(spec) for name, spec in sorted(params.items())},
            }
    return {"pve_version": VERSION, "paths": paths}


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    json.dump(facts(load(argv[1])), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
