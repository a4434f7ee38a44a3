"""Read the SGLang server-argument catalogue (data/sglang/catalogue-<version>.json).

The catalogue is built from the pinned wheel's own argparse by tools/sglang_catalogue.py.
This module is pure (stdlib only, no torch, no Ansible) so a profile can be checked on the
control node against exactly the flags, choices and types the pinned sglang accepts, and
so an option is resolved the way argparse resolves it: `--tp` is not a flag of its own but
an abbreviation argparse expands to `--tp-size` (allow_abbrev), and an abbreviation that
fits two options is an error.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

_HERE = os.path.dirname(os.path.abspath(__file__))
# plugins/plugin_utils/ -> repository root -> data/sglang
DEFAULT_DATA_DIR = os.path.normpath(os.path.join(_HERE, "..", "..", "data", "sglang"))
_FILE = re.compile(r"^catalogue-(?P<version>.+)\.json$")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


class CatalogueError(Exception):
    """Base class: every error message names the flag or version at fault."""


class UnknownVersion(CatalogueError):
    pass


class UnknownFlag(CatalogueError):
    pass


class AmbiguousFlag(CatalogueError):
    def __init__(self, option: str, matches: list[str]):
        self.option = option
        self.matches = matches
        super().__init__(f"ambiguous option: {option} could match {', '.join(matches)}")


# A NamedTuple, not a dataclass: tests load this file by path (outside sys.modules),
# where dataclasses cannot resolve their own module.
class Resolved(NamedTuple):
    """How an option string given by a user maps onto the parser.

    name: the flag's key in the catalogue (its first long option string);
    option: the option string argparse matched (an alias or the name itself);
    how: "exact" (an option string as written) or "prefix" (an argparse abbreviation);
    value: the text after "=" in "--flag=value", else None.
    """

    name: str
    option: str
    how: str
    value: str | None
    spec: dict[str, Any]


def _version_key(version: str) -> tuple:
    parts = []
    for piece in re.split(r"[.+-]", version):
        match = re.match(r"(\d*)(.*)", piece)
        number, rest = match.group(1), match.group(2)
        parts.append((int(number) if number else -1, rest))
    return tuple(parts)


def available_versions(data_dir: str = DEFAULT_DATA_DIR) -> list[str]:
    """The sglang versions with a catalogue, oldest first."""
    try:
        names = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    versions = [m.group("version") for m in map(_FILE.match, names) if m]
    return sorted(versions, key=_version_key)


def catalogue_file(version: str, data_dir: str = DEFAULT_DATA_DIR) -> str:
    return os.path.join(data_dir, f"catalogue-{version}.json")


def load_catalogue(version: str, data_dir: str = DEFAULT_DATA_DIR) -> Catalogue:
    path = catalogue_file(version, data_dir)
    if not os.path.isfile(path):
        known = ", ".join(available_versions(data_dir)) or "none"
        raise UnknownVersion(f"no sglang catalogue for version {version!r} (have: {known})")
    with open(path, encoding="utf-8") as handle:
        return Catalogue(json.load(handle))


# argparse's own test for a word that is a negative number, not an option (Python 3.11;
# 3.13 accepts more, never less): a parser without options that look like negative numbers
# (sglang's and sglang-router's have none) reads such a word as a value.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def option_like(word: Any) -> bool:
    """Whether argparse could read `word`, given as a separate argv word, as an option
    rather than as the value of the flag before it: it starts with '-' and is not a negative
    number. Such a word inside a list value (nargs) ends the list and starts another option
    (`--encoder-urls x --host 0.0.0.0`); after an optional-value flag (nargs '?') the flag
    takes no value and the word is parsed as an option of its own."""
    text = str(word)
    return text.startswith("-") and not _NEGATIVE_NUMBER.match(text)


def parse_human_int(text: str) -> int:
    """sglang's human_readable_int: plain ints, SI (1k, 25.6k) and IEC (1Ki) suffixes."""
    text = text.strip()
    match = _HUMAN_INT.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise ValueError(f"decimals are not allowed with IEC suffix {suffix!r}")
            return int(number) * _IEC[suffix]
        try:
            return int(Decimal(number) * _SI[suffix])
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
            raise ValueError(text) from exc
    return int(text)


class Catalogue:
    """One sglang version's flags, looked up and resolved like its argparse parser."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.version: str = data["sglang_version"]
        self.flags: dict[str, dict[str, Any]] = data["flags"]
        parser = data.get("parser", {})
        self.allow_abbrev: bool = parser.get("allow_abbrev", True)
        # Every option string argparse knows, in declaration order, to its flag's key.
        self.options: dict[str, str] = {}
        for name, spec in self.flags.items():
            for option in spec.get("aliases") or [name]:
                self.options[option] = name

    def __contains__(self, option: str) -> bool:
        return option in self.options

    def lookup(self, option: str) -> dict[str, Any]:
        """The spec of an exact option string (a name or an alias); no abbreviations."""
        try:
            return self.flags[self.options[option]]
        except KeyError:
            raise UnknownFlag(self._unknown(option)) from None

    def resolve(self, arg: str) -> Resolved:
        """Resolve one command-line option as argparse does (Python 3.11-3.13).

        An exact option string wins; "--flag=value" is split at "="; otherwise, with
        allow_abbrev, every option string starting with the text matches, and more than
        one match is an error even when they belong to the same flag.
        """
        if not arg.startswith("-") or len(arg) < 2:
            raise UnknownFlag(f"{arg!r} is not an option (options start with '-')")
        if arg in self.options:
            return Resolved(self.options[arg], arg, "exact", None, self.lookup(arg))
        option, sep, value = arg.partition("=")
        explicit = value if sep else None
        if sep and option in self.options:
            return Resolved(self.options[option], option, "exact", explicit, self.lookup(option))
        if self.allow_abbrev and arg.startswith("--"):
            matches = [o for o in self.options if o.startswith(option)]
            if len(matches) > 1:
                raise AmbiguousFlag(arg, matches)
            if len(matches) == 1:
                name = self.options[matches[0]]
                return Resolved(name, matches[0], "prefix", explicit, self.flags[name])
        raise UnknownFlag(self._unknown(option))

    def choices(self, option: str) -> list[Any] | None:
        """Allowed values of a flag (any option string or abbreviation); None = any."""
        return self.resolve(option).spec.get("choices")

    def is_deprecated(self, option: str) -> bool:
        return bool(self.resolve(option).spec.get("deprecated"))

    def takes_value(self, option: str) -> bool:
        return self.resolve(option).spec.get("nargs") != 0

    def check_value(self, option: str, value: Any) -> list[str]:
        """Problems with giving `value` to `option` (empty when argparse would accept it).

        A flag that takes no value accepts True (present) or False/None (absent). Values
        of nargs flags may be lists; each item is checked.
        """
        resolved = self.resolve(option)
        spec, name = resolved.spec, resolved.name
        if spec.get("nargs") == 0:
            if value in (True, False, None):
                return []
            return [f"{name} is a switch and takes no value (got {value!r}); use true/false"]
        nargs = spec.get("nargs")
        if isinstance(value, list | tuple):
            if nargs in (None, "?"):
                return [f"{name} takes one value, got a list {list(value)!r}"]
            items = list(value)
        else:
            items = [value]
        if nargs == "+" and not items:
            return [f"{name} needs at least one value"]
        problems = []
        for item in items:
            problems.extend(self._check_one(name, spec, item))
        return problems

    def _check_one(self, name: str, spec: dict[str, Any], value: Any) -> list[str]:
        if isinstance(value, bool):
            return [f"{name} takes a {spec.get('type')} value, got the boolean {value!r}"]
        text = value if isinstance(value, str) else json.dumps(value)
        kind = spec.get("type")
        try:
            if spec.get("converter") == "human_readable_int":
                converted: Any = parse_human_int(text)
            elif kind == "int":
                converted = int(text)
            elif kind == "float":
                converted = float(text)
            elif kind == "json":
                converted = json.loads(text)
            else:
                converted = text
        except ValueError:
            return [f"{name}: {text!r} is not a valid {kind}"]
        choices = spec.get("choices")
        if choices is not None and converted not in choices:
            allowed = ", ".join(str(c) for c in choices)
            return [f"{name}: {text!r} is not one of the allowed values ({allowed})"]
        return []

    def _unknown(self, option: str) -> str:
        return f"sglang {self.version} has no option {option}"
