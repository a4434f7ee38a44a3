"""The catalogue loader (plugins/plugin_utils/gpuhost_catalogue.py) on the committed
catalogues of the real wheels, and its option resolution against argparse itself."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_catalogue as gc

ROOT = Path(__file__).resolve().parents[1]

OLD, NEW = "0.5.10.post1", "0.5.23"


@pytest.fixture(scope="module", params=[OLD, NEW])
def cat(request):
    return gc.load_catalogue(request.param)


@pytest.fixture(scope="module")
def old():
    return gc.load_catalogue(OLD)


@pytest.fixture(scope="module")
def new():
    return gc.load_catalogue(NEW)


def test_versions_and_unknown_version():
    assert [v for v in gc.available_versions() if v in (OLD, NEW)] == [OLD, NEW]
    with pytest.raises(gc.UnknownVersion, match=r"0\.4\.0.*have: .*0\.5\.10\.post1"):
        gc.load_catalogue("0.4.0")


def test_version_order():
    assert sorted(["0.5.23", "0.5.9", "0.5.10.post1", "0.5.10"], key=gc._version_key) == [
        "0.5.9",
        "0.5.10",
        "0.5.10.post1",
        "0.5.23",
    ]


def test_tp_is_an_abbreviation_of_tp_size(cat):
    # docs/reference.md §2: `--tp` is argparse prefix-matching `--tp-size`.
    r = cat.resolve("--tp")
    assert (r.option, r.how) == ("--tp-size", "prefix")
    # 0.5.10.post1 declares --tensor-parallel-size first, 0.5.23 --tp-size: one flag either way.
    assert r.name in ("--tensor-parallel-size", "--tp-size")
    assert set(r.spec["aliases"]) >= {"--tp-size"}
    exact = cat.resolve("--tp-size")
    assert (exact.name, exact.how) == (r.name, "exact")
    assert cat.resolve("--tp=8").value == "8"


def test_lookup_is_exact_only(cat):
    assert cat.lookup("--tp-size")["dest"] in ("tensor_parallel_size", "tp_size")
    with pytest.raises(gc.UnknownFlag, match=r"has no option --tp$"):
        cat.lookup("--tp")


def test_nsa_backends_renamed_after_0_5_11(old, new):
    assert old.choices("--nsa-decode-backend") is not None
    with pytest.raises(gc.UnknownFlag, match=r"sglang 0\.5\.23 has no option --nsa-decode-backend"):
        new.resolve("--nsa-decode-backend")
    assert "trtllm" in new.choices("--dsa-decode-backend")


def test_allreduce_fusion_deprecated_by_0_5_23(old, new):
    assert not old.is_deprecated("--enable-flashinfer-allreduce-fusion")
    assert new.is_deprecated("--enable-flashinfer-allreduce-fusion")


def test_defaults_from_reference(cat):
    assert cat.lookup("--host")["default"] == "127.0.0.1"
    assert cat.lookup("--port")["default"] == 30000
    assert "bf16" in cat.choices("--kv-cache-dtype")


def test_ambiguous_prefix(cat):
    with pytest.raises(gc.AmbiguousFlag) as info:
        cat.resolve("--enable-")
    assert len(info.value.matches) > 1
    assert "ambiguous option: --enable-" in str(info.value)


def test_not_an_option(cat):
    with pytest.raises(gc.UnknownFlag, match="not an option"):
        cat.resolve("tp")


def test_check_value(old):
    assert old.check_value("--tp-size", "8") == []
    assert old.check_value("--tp", 8) == []
    assert "not a valid int" in old.check_value("--tp-size", "eight")[0]
    assert old.check_value("--kv-cache-dtype", "bf16") == []
    assert "allowed values" in old.check_value("--kv-cache-dtype", "fp16")[0]
    assert old.check_value("--disable-custom-all-reduce", True) == []
    assert "switch" in old.check_value("--disable-custom-all-reduce", "yes")[0]
    assert old.check_value("--mem-fraction-static", "0.92") == []
    assert old.check_value("--max-total-tokens", "25.6k") == []
    assert old.check_value("--max-total-tokens", "1.5Ki") != []
    assert old.check_value("--json-model-override-args", '{"a": 1}') == []
    assert "takes one value" in old.check_value("--port", [1, 2])[0]
    assert "boolean" in old.check_value("--port", True)[0]


def test_check_value_json_and_nargs():
    cat = gc.Catalogue(
        {
            "sglang_version": "t",
            "flags": {
                "--cfg": {"aliases": ["--cfg"], "type": "json", "nargs": None},
                "--paths": {"aliases": ["--paths"], "type": "str", "nargs": "+"},
            },
        }
    )
    assert cat.check_value("--cfg", {"a": 1}) == []
    assert "not a valid json" in cat.check_value("--cfg", "{bad")[0]
    assert cat.check_value("--paths", ["a", "b"]) == []
    assert "at least one" in cat.check_value("--paths", [])[0]


@pytest.mark.parametrize(
    ("text", "value"),
    [("7", 7), ("1k", 1000), ("25.6k", 25600), ("1Ki", 1024), ("2Mi", 2 * 2**20), ("1G", 10**9)],
)
def test_parse_human_int(text, value):
    assert gc.parse_human_int(text) == value


@pytest.mark.parametrize("text", ["1.5Ki", "1K", "k", "1.5"])
def test_parse_human_int_rejects(text):
    with pytest.raises(ValueError):
        gc.parse_human_int(text)


def _argparse_of(cat):
    """A parser with exactly the catalogue's option strings, as sglang declares them."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for spec in cat.flags.values():
        parser.add_argument(*spec["aliases"], dest=spec["dest"], nargs=spec["nargs"] or None)
    return parser


def _argparse_resolve(parser, arg):
    try:
        parsed = parser._parse_optional(arg)
    except (argparse.ArgumentError, SystemExit):
        return "ambiguous"
    # (action, option_string, [sep,] explicit_arg) across Python 3.11-3.13; None = positional.
    # Newer 3.12/3.13 releases return a list of such tuples, one per option the string could
    # be: more than one is an ambiguous prefix (the caller's error, there).
    if isinstance(parsed, list):
        if len(parsed) > 1:
            return "ambiguous"
        parsed = parsed[0] if parsed else None
    if not parsed or parsed[0] is None:
        return None
    return parsed[1]


def _probes(cat):
    options = list(cat.options)
    probes = set(options)
    for option in options:
        body = option[2:] if option.startswith("--") else None
        if body:
            for cut in {1, 2, 3, len(body) // 2, len(body) - 1}:
                if 0 < cut < len(body):
                    probes.add("--" + body[:cut])
    probes |= {"--tp", "--tp=8", "--model=x", "--zzz", "--enable-", "--disable-cuda"}
    return sorted(probes)


def test_resolution_agrees_with_argparse(cat):
    parser = _argparse_of(cat)
    disagreements = []
    for arg in _probes(cat):
        expected = _argparse_resolve(parser, arg)
        try:
            got = cat.resolve(arg).option
        except gc.AmbiguousFlag:
            got = "ambiguous"
        except gc.UnknownFlag:
            got = None
        if got != expected:
            disagreements.append((arg, expected, got))
    assert not disagreements[:10]
    assert len(_probes(cat)) > 1000


def test_catalogue_files_are_json_with_flags():
    for version in gc.available_versions():
        with open(gc.catalogue_file(version)) as handle:
            assert json.load(handle)["flags"]
