# gpuhost.gpu.factfile: the jsonfile fact cache, decoded once per run.
from __future__ import annotations

DOCUMENTATION = """
    name: factfile
    short_description: JSON files per host, as ansible.builtin.jsonfile, read once per run
    description:
      - The same files as C(ansible.builtin.jsonfile) (one per host, the same names and the same
        encoding of Ansible's data types), so either plugin reads what the other wrote.
      - The difference is speed. ansible-core wraps every persistent cache plugin in a layer that
        decodes the host's whole JSON document again on every read, and it reads the fact cache
        once or twice for each task of each host (VariableManager.get_vars). With gpuhost's
        facts (~47 KB a GPU host) that was ~10 ms a task, ~2 s of a no-op site.yml. This plugin
        keeps each host's decoded facts in memory after the first read and writes the file
        through on every change, so the files stay what later runs and tools read.
      - Expiry as jsonfile's: a file older than the timeout is not read.
    author: gpuhost
    options:
      _uri:
        required: true
        description: The directory of the JSON files.
        env:
          - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
        ini:
          - key: fact_caching_connection
            section: defaults
        type: path
      _prefix:
        description: A prefix for the file names.
        env:
          - name: ANSIBLE_CACHE_PLUGIN_PREFIX
        ini:
          - key: fact_caching_prefix
            section: defaults
      _timeout:
        default: 86400
        description: Seconds after which a host's file is not read any more (0 never).
        env:
          - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
        ini:
          - key: fact_caching_timeout
            section: defaults
        type: integer
"""

import json  # noqa: E402 - after the doc block
import os  # noqa: E402

from ansible._internal._json._profiles import _cache_persistence  # noqa: E402
from ansible.plugins.cache.jsonfile import CacheModule as JsonFileCacheModule  # noqa: E402

# What ansible-core's wrapper of persistent cache plugins puts around the values and the keys
# (ansible/_internal/_plugins/_cache.py): the same here, so the files are jsonfile's.
_PAYLOAD_KEY = "__payload__"
_KEY_PREFIX = f"s{_cache_persistence._Profile.schema_id}_"


def encode(value: dict) -> dict:
    return {_PAYLOAD_KEY: json.dumps(value, cls=_cache_persistence.Encoder)}


def decode(stored: dict) -> dict:
    return json.loads(stored[_PAYLOAD_KEY], cls=_cache_persistence.Decoder)


class CacheModule(JsonFileCacheModule):
    """jsonfile's files, with each host's facts decoded once and then kept in memory."""

    # Not persistent to ansible-core: it then hands this plugin the values themselves instead of
    # wrapping it in the layer that decodes on every read. The files are written here.
    _persistent = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._decoded: dict[str, dict] = {}

    def get(self, key: str) -> dict:
        if key not in self._decoded:
            # jsonfile's read: KeyError when there is no file or it has expired.
            self._decoded[key] = decode(super().get(_KEY_PREFIX + key))
        return self._decoded[key]

    def set(self, key: str, value: dict) -> None:
        super().set(_KEY_PREFIX + key, encode(value))
        self._decoded[key] = value

    def contains(self, key: str) -> bool:
        return key in self._decoded or super().contains(_KEY_PREFIX + key)

    def delete(self, key: str) -> None:
        self._decoded.pop(key, None)
        super().delete(_KEY_PREFIX + key)

    def keys(self) -> list[str]:
        # jsonfile's own keys() fails when no prefix is set (len(None)).
        start = (self.get_option("_prefix") or "") + _KEY_PREFIX
        skip = len(start) - len(_KEY_PREFIX)
        stored = {
            name[len(start) :]
            for name in os.listdir(self._cache_dir)
            if name.startswith(start) and not self.has_expired(name[skip:])
        }
        return sorted(stored | set(self._decoded))

    def flush(self) -> None:
        self._decoded = {}
        super().flush()
