"""The docs that describe the code name only paths that exist: every repository path that
README.md (its docs index included), docs/ARCHITECTURE.md and docs/CONVENTIONS.md name in a
code span, a code block, a link or plain prose is a file or directory of this checkout, and
every link in docs/*.md and roles/*/README.md leads to one.

A name is read the way a reader would follow it: a link relative to the file it is in; a
path in code relative to the repository root, or, for the short forms these docs use inside
a role, a package or a folder (`meta/argument_specs.yml`, `commands/base.py`,
`gpuhost_finding.py`), relative to any role, `src/gpuhost/`, `plugins/*/`, `playbooks/`,
`docs/` or an example inventory. Placeholders (`<role>`, `<yours>`) and globs (`*`) must match
at least one path. What a run writes (`runs/`, `.cache/`, the venv) is not in the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "ARCHITECTURE.md", ROOT / "docs" / "CONVENTIONS.md"]

# Top-level entries of the repository: a prose word that starts with one of these and a
# slash is a path. A fixed list, so that a top-level folder that is gone is still checked.
TOP = (
    "bench",
    "dashboards",
    "data",
    "docs",
    "group_vars",
    "inventory",
    "locks",
    "meta",
    "molecule",
    "playbooks",
    "plugins",
    "profiles",
    "roles",
    "scripts",
    "src",
    "tests",
    "tools",
)
PROSE_PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(TOP)})/[\w./*<>-]*")
# Files named without a folder are checked when they are code, settings or docs.
BARE_SUFFIXES = (".py", ".yml", ".yaml", ".md", ".sh", ".cfg", ".toml", ".j2", ".txt")
# Where a path that is not relative to the root is looked for (globs).
BASES = (
    ".",
    "docs",
    "playbooks",
    "src/gpuhost",
    "plugins/*",
    "roles/*",
    "inventory/*",
)
# Written by a run or by `make venv`, never part of a checkout.
NOT_IN_CHECKOUT = ("runs/", ".cache/", ".venv/", "/", "~", "http://", "https://", "-")


def _clean(token: str) -> str:
    token = re.sub(r"<[^<>]*>", "*", token)  # a placeholder matches any name
    return token.lstrip("([{\"'").rstrip(")]},;:.!?\"'")


def _is_path(token: str) -> bool:
    if not token or token.startswith(NOT_IN_CHECKOUT) or re.search(r"[=:|{}@$\\]", token):
        return False
    if not re.search(r"[A-Za-z0-9]", token) or not re.fullmatch(r"[\w./*-]+", token):
        return False
    name = token.rstrip("/")
    return "/" in name or name.endswith(BARE_SUFFIXES)


def _exists(path: str, base: Path) -> bool:
    path = path.rstrip("/") or "."
    if "*" in path:
        return any(base.glob(path))
    return (base / path).exists()


def _found_in_repo(path: str) -> bool:
    for pattern in BASES:
        bases = [ROOT] if pattern == "." else sorted(ROOT.glob(pattern))
        if any(_exists(path, base) for base in bases if base.is_dir()):
            return True
    return False


def named_paths(text: str) -> tuple[list[str], list[str]]:
    """(link targets, other paths) that a Markdown text names, in order, each once."""
    links: list[str] = []
    code: list[str] = []
    # Fenced blocks first: every path-like word in them.
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    for block in blocks:
        code += [_clean(w) for w in re.split(r"[\s,]+", block)]
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        target = target.split("#", 1)[0]
        if target and not target.startswith(("http://", "https://", "mailto:")):
            links.append(target)
    prose = re.sub(r"\]\(([^)\s]+)\)", "]", prose)
    for span in re.findall(r"`([^`\n]+)`", prose):
        code += [_clean(w) for w in re.split(r"[\s,]+", span)]
    prose = re.sub(r"`[^`\n]+`", " ", prose)
    code += [_clean(m) for m in PROSE_PATH.findall(prose)]
    return list(dict.fromkeys(links)), [p for p in dict.fromkeys(code) if _is_path(p)]


def missing_paths(text: str, where: Path) -> list[str]:
    """The paths `text` (a file in folder `where`) names that this checkout does not have."""
    links, paths = named_paths(text)
    missing = [f"link {t}" for t in links if not _exists(t, where)]
    return missing + [p for p in paths if not _found_in_repo(p)]


def test_the_docs_name_only_paths_that_exist():
    missing = {
        str(doc.relative_to(ROOT)): found
        for doc in DOCS
        if (found := missing_paths(doc.read_text(encoding="utf-8"), doc.parent))
    }
    assert not missing, f"paths named in the docs that do not exist: {missing}"


def test_every_link_in_the_docs_and_the_role_readmes_resolves():
    # Text moved between these files keeps working links (relative to the file it is in).
    broken = {
        str(doc.relative_to(ROOT)): gone
        for doc in [*sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("roles/*/README.md"))]
        if (
            gone := [
                t
                for t in named_paths(doc.read_text(encoding="utf-8"))[0]
                if not _exists(t, doc.parent)
            ]
        )
    }
    assert not broken, f"links to files that do not exist: {broken}"


def test_the_extractor_reads_the_paths_the_docs_name():
    # Not vacuous: the architecture map's own anchors are found as paths.
    _, paths = named_paths((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    for expected in (
        "plugins/module_utils/gpuhost_finding.py",
        "plugins/module_utils/gpuhost_listen.py",
        "src/gpuhost/plugin_code.py",
        "roles/rolling_update/tasks/routed.yml",
        "roles/*/meta/argument_specs.yml",
    ):
        assert expected in paths, (expected, paths)


def test_a_path_that_is_gone_is_found(tmp_path):
    planted = {
        "`roles/base/tasks/no_such_step.yml`": "roles/base/tasks/no_such_step.yml",
        "`gpuhost_no_such_helper.py`": "gpuhost_no_such_helper.py",
        "`commands/no_such_command.py`": "commands/no_such_command.py",
        "the tests in tests/no_such_dir/ say": "tests/no_such_dir/",
        "```\nplugins/no_such_kind/     gone\n```": "plugins/no_such_kind/",
        "[gone](docs/no-such-page.md)": "link docs/no-such-page.md",
        "`roles/<role>/no_such_folder/`": "roles/*/no_such_folder/",
    }
    original = (ROOT / "README.md").read_text(encoding="utf-8")
    copy = tmp_path / "README.md"
    copy.write_text(original + "\n" + "\n\n".join(planted) + "\n", encoding="utf-8")
    # Read as if it were the README at the root: only the planted names are missing.
    found = missing_paths(copy.read_text(encoding="utf-8"), ROOT)
    assert sorted(found) == sorted(planted.values()), found
    assert missing_paths(original, ROOT) == []


def _index() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- docs-index:", 1)[1].split("<!-- docs-index:end -->", 1)[0]
    return re.findall(r"^- \[[^\]]+\]\(docs/([^)#]+)\)", block, flags=re.M)


def test_the_docs_index_lists_every_file_in_docs_once():
    listed = _index()
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").iterdir() if p.is_file())
