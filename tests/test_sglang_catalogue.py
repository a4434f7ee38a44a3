"""The SGLang argument catalogue builder (tools/sglang_catalogue.py).

Unit tests feed the builder parsers made here; the regeneration tests rebuild each committed
catalogue from the real wheel its lock pins and diff it. Those sync a venv per lock under
.cache/sglang-venvs/ with uv (hard links into uv's cache: ~11 GB of links per lane, ~5 GB of
downloads the first time on a machine, seconds afterwards) and import sglang.srt.server_args
on the CPU: no GPU is needed. GPUHOST_SKIP_WHEEL_TESTS=1 skips them for a quick local run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "sglang_catalogue", ROOT / "tools/sglang_catalogue.py"
)
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)

LOCKS = sorted((ROOT / "locks").glob("sglang-[0-9]*.txt"))
CATALOGUES = sorted((ROOT / "data/sglang").glob("catalogue-*.json"))


def human_readable_int(value):  # stands for sglang's converter of the same name
    return int(value)


def json_list_type(value):  # stands for sglang's JSON-list converter
    return json.loads(value)


class DeprecatedAction(argparse.Action):  # shaped like sglang's
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        pass


@pytest.fixture
def catalogue():
    p = argparse.ArgumentParser()
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1, help="TP size.")
    p.add_argument("--mem-fraction", type=float, default=None)
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--backend", choices={"zeta", "alpha", "mid"}, help="one of %(choices)s")
    p.add_argument("--dtype", choices=["auto", "bf16"], default="auto", help="Default %(default)s.")
    p.add_argument("--max-tokens", type=human_readable_int)
    p.add_argument("--override", type=json.loads, default="{}")
    p.add_argument("--layers", type=json_list_type, nargs="+")
    p.add_argument("--enable-x", action="store_true", help="Enable   x\n   now.")
    p.add_argument("--old-flag", action=DeprecatedAction, help="Note: gone.")
    p.add_argument("--legacy", action="store_true", help="[Deprecated] Use --new.")
    p.add_argument("--mentions", action="store_true", help="Replaces the deprecated --legacy.")
    p.add_argument("--fusion", action=argparse.BooleanOptionalAction)
    p.add_argument("--lora", action="append", default=argparse.SUPPRESS)
    return sc.catalogue_from_parser(p, "9.9.9")


def test_keys_are_first_long_option_and_aliases_keep_order(catalogue):
    flags = catalogue["flags"]
    assert flags["--tensor-parallel-size"]["aliases"] == ["--tensor-parallel-size", "--tp-size"]
    assert flags["--help"]["aliases"] == ["-h", "--help"]
    assert "--tp-size" not in flags
    assert flags["--model-path"]["required"] is True


def test_types_actions_and_converters(catalogue):
    f = catalogue["flags"]
    got = {k: (v["type"], v["action"], v["converter"], v["nargs"]) for k, v in f.items()}
    assert got["--tensor-parallel-size"] == ("int", "store", None, None)
    assert got["--mem-fraction"] == ("float", "store", None, None)
    assert got["--model-path"] == ("str", "store", None, None)
    assert got["--max-tokens"] == ("int", "store", "human_readable_int", None)
    assert got["--override"] == ("json", "store", "loads", None)
    assert got["--layers"] == ("json", "store", "json_list_type", "+")
    assert got["--enable-x"] == ("bool", "store_true", None, 0)
    assert got["--old-flag"] == ("bool", "DeprecatedAction", None, 0)
    assert got["--fusion"] == ("bool", "boolean_optional", None, 0)
    assert got["--lora"] == ("str", "append", None, None)
    assert got["--help"] == (None, "help", None, 0)


def test_choices_defaults_and_help(catalogue):
    f = catalogue["flags"]
    # A set's order follows the hash seed: sorted, so the file is stable.
    assert f["--backend"]["choices"] == ["alpha", "mid", "zeta"]
    assert f["--dtype"]["choices"] == ["auto", "bf16"]
    assert f["--dtype"]["help"] == "Default auto."
    assert f["--enable-x"]["help"] == "Enable x now."
    assert f["--tensor-parallel-size"]["default"] == 1
    assert f["--override"]["default"] == "{}"
    assert f["--lora"]["default"] is None  # SUPPRESS is not a value a user can give
    assert f["--mem-fraction"]["choices"] is None


def test_deprecation_from_action_class_or_leading_word(catalogue):
    deprecated = sorted(k for k, v in catalogue["flags"].items() if v["deprecated"])
    assert deprecated == ["--legacy", "--old-flag"]


def test_render_is_stable(catalogue):
    text = sc.render(catalogue)
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert sc.render(json.loads(text)) == text
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_jsonable_drops_object_addresses():
    class Thing:
        pass

    assert " at 0x" not in sc._jsonable(Thing())
    assert sc._jsonable(float("inf")) == "inf"
    assert sc._jsonable((1, {2})) == [1, [2]]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_lock_metadata(lock):
    assert sc.lock_python_version(lock) == "3.11"
    assert lock.name.startswith(f"sglang-{sc.lock_sglang_version(lock)}-")


def test_every_lock_has_a_catalogue_and_back():
    locked = {sc.lock_sglang_version(lock) for lock in LOCKS}
    catalogued = {p.name.removeprefix("catalogue-").removesuffix(".json") for p in CATALOGUES}
    assert locked == catalogued
    assert {"0.5.10.post1", "0.5.23"} <= catalogued


def test_committed_catalogues_are_rendered_form():
    for path in CATALOGUES:
        data = json.loads(path.read_text())
        assert sc.render(data) == path.read_text(), path.name
        assert path.name == f"catalogue-{data['sglang_version']}.json"
        assert data["schema"] == sc.SCHEMA


@pytest.mark.skipif(
    os.environ.get("GPUHOST_SKIP_WHEEL_TESTS") == "1", reason="GPUHOST_SKIP_WHEEL_TESTS=1"
)
@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_catalogue_matches_the_real_wheel(lock):
    diff = sc.check(lock, None)
    assert not diff, (
        f"data/sglang/ differs from the wheel pinned by {lock.name}; rebuild it with "
        f"tools/sglang_catalogue.py build --lock {lock.relative_to(ROOT)}\n" + "".join(diff[:80])
    )
