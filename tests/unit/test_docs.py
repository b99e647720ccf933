"""The README and the documentation site stay what a new user is checked against.

- README.md is short (at most 200 lines) and its links to the docs pages resolve.
- Every page in mkdocs.yml's nav exists, every page under docs/ is in the nav, and the home page links each.
- Benchmarks open with the key numbers and keep commands out of headings; reference pages tell no history.
- The repository cites only itself: no outside specification, seed document or issue number in the README or
  the docs (the patterns are spelled in pieces below, so this file does not match them itself).
- Every field of the settings model (``bridge/settings.py``, walked recursively) is in docs/settings.md.
- Code that points at the documentation points at something that exists: every ``docs/<page>.md`` named in
  bridge/, workers/, tasks/, tests/, bench/ or docker/ is a file, and every README section cited by name
  (``README "X"``, ``README, "X"``, ``README: X``) is a heading of README.md.

The build itself (broken links and anchors) is the ``mkdocs build --strict`` gate and
``tests/integration/test_docs_site.py``.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from bridge.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 200

# Documents that are not in the repository must not be cited; outside facts are cited in docs/references.md.
FOREIGN_CITATION = re.compile("S" + r"PEC|§|\b[Ss]eed 0\d*|\b[Ss]eeds? \d{3}\b|\b[Ii]ssue \d+")
MARKDOWN_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")

# Where code cites the documentation. Code files are read with their line breaks (and a comment's leading
# "#") folded into spaces, so a citation wrapped over two comment or docstring lines is still one match.
CODE_DIRS = ("bridge", "workers", "tasks", "tests", "bench", "docker")
CODE_SUFFIXES = {".py", ".json", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".ini", ".txt", ".md", ""}
# docs/<page>.md, not part of a longer path or a URL.
DOCS_PAGE_CITATION = re.compile(r"(?<![\w/.-])docs/([\w./-]*?\.md)\b")
# README "X", README, "X", README: "X", README section "X" (README.md too) ...
README_QUOTED_CITATION = re.compile(r'\bREADME(?:\.md)?(?:\s+section)?(?:\s*[,:]\s*|\s+)"([^"]+)"')
# ... and README: X / README, X up to the closing bracket or the sentence's end; "X, Y" names several.
README_BARE_CITATION = re.compile(r"\bREADME(?:\.md)?\s*[,:]\s+([A-Z][^\"()\n;.]*?)\s*(?=[);.]|$)")
FOLDED_LINE_BREAK = re.compile(r"[ \t]*\n\s*(?:#+[ \t]*)?")


def _nav_pages(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_pages(value)


class _ConfigLoader(yaml.SafeLoader):
    """A safe loader that reads mkdocs.yml's ``!!python/name:`` tags as their names (nothing is imported)."""


_ConfigLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: f"python/name:{suffix}"
)


def mkdocs_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_ConfigLoader)
    return config


def nav_pages() -> list[str]:
    return list(_nav_pages(mkdocs_config()["nav"]))


def doc_files() -> list[Path]:
    return sorted([README, *DOCS.rglob("*.md")])


def local_links(text: str) -> list[str]:
    """Relative link targets (no scheme, no pure anchor), anchors stripped."""
    out = []
    for target in MARKDOWN_LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_mkdocs_config_is_strict_material_with_an_explicit_nav() -> None:
    config = mkdocs_config()
    assert config["strict"] is True
    assert config["theme"]["name"] == "material"
    assert config["docs_dir"] == "docs"
    assert config["validation"]["anchors"] == "warn"  # strict turns warnings into failures


def test_every_nav_page_exists() -> None:
    pages = nav_pages()
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert missing == []
    assert len(pages) == len(set(pages)), "a page is in the nav twice"


def test_every_docs_page_is_in_the_nav() -> None:
    on_disk = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert on_disk - set(nav_pages()) == set()


def test_readme_links_to_every_docs_page_and_each_resolves() -> None:
    targets = local_links(README.read_text())
    broken = [t for t in targets if not (ROOT / t).exists()]
    assert broken == []
    linked = {(ROOT / t).resolve() for t in targets}
    unlinked = [page for page in nav_pages() if (DOCS / page).resolve() not in linked]
    assert unlinked == [], "README.md should link to each docs page"


def test_the_home_page_links_to_every_page() -> None:
    linked = {(DOCS / target).resolve() for target in local_links((DOCS / "index.md").read_text())}
    unlinked = [page for page in nav_pages() if page != "index.md" and (DOCS / page).resolve() not in linked]
    assert unlinked == [], "docs/index.md lists every page of the site"


def test_benchmarks_open_with_the_key_numbers_and_keep_commands_out_of_headings() -> None:
    text = (DOCS / "benchmarks.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings[:2] == ["# Benchmarks", "## Key numbers"]
    key_numbers = text.split("## Key numbers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in key_numbers.splitlines() if line.startswith("| ") and "---" not in line]
    assert 8 <= len(rows) <= 14, "one screen of key numbers"
    for page in ("benchmarks.md", "outages.md", "chaos.md"):
        with_commands = [
            h for h in (DOCS / page).read_text().splitlines() if h.startswith("#") and "python -m" in h
        ]
        assert with_commands == [], f"{page}: a command belongs in the section's text, not its heading"


# Pages that report measurements or past runs; every other page is reference and says how things are.
REPORT_PAGES = {"benchmarks.md", "chaos.md", "outages.md", "findings.md"}
HISTORY = re.compile(
    r"used to be|was fixed|now fixed|before this change|after this change|before the change|after the change"
    r"|this round|earlier round",
    re.IGNORECASE,
)


def test_reference_pages_describe_the_present_not_the_history() -> None:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        if path.relative_to(DOCS).as_posix() in REPORT_PAGES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)}" for m in HISTORY.finditer(line)]
    assert found == [], "history belongs in CHANGELOG.md"


def test_links_between_docs_pages_resolve() -> None:
    broken = []
    for path in DOCS.rglob("*.md"):
        for target in local_links(path.read_text()):
            if not (path.parent / target).is_file():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert broken == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_citation_of_documents_outside_the_repository(path: Path) -> None:
    hits = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FOREIGN_CITATION.search(line)
    ]
    assert hits == []


def test_the_citation_pattern_finds_what_it_should() -> None:
    for bad in ("S" + "PEC 4", "§4", "seed" + " 001's model", "seeds " + "000/001", "see is" + "sue 5"):
        assert FOREIGN_CITATION.search(bad), bad
    for good in ("the seed-1 run", "--seed 5", "the specification", "Issues"):
        assert not FOREIGN_CITATION.search(good), good


# --- code that cites the documentation ----------------------------------------------------------------------


def markdown_headings(text: str) -> set[str]:
    """The ATX headings of a Markdown text, outside fenced code blocks."""
    headings: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            headings.add(match.group(1))
    return headings


def readme_citations(text: str) -> list[tuple[str, list[str]]]:
    """Each README section citation in a text: the cited words and the section names they stand for."""
    found = [(m.group(0), [m.group(1)]) for m in README_QUOTED_CITATION.finditer(text)]
    for match in README_BARE_CITATION.finditer(text):
        names = match.group(1)
        found.append((match.group(0), [names, *names.split(", ")] if ", " in names else [names]))
    return found


def code_files() -> list[Path]:
    this_file = Path(__file__).resolve()  # its docstring and pattern checks quote citations on purpose
    return sorted(
        path
        for folder in CODE_DIRS
        for path in (ROOT / folder).rglob("*")
        if path.is_file()
        and path.suffix in CODE_SUFFIXES
        and "__pycache__" not in path.parts
        and path.resolve() != this_file
    )


def test_the_code_citation_patterns_find_what_they_should() -> None:
    cases = {
        'the contract (README "Receiving")': ["Receiving"],
        'layout: README, "Redis door").': ["Redis door"],
        'see the README section "Chaos and soak" for': ["Chaos and soak"],
        "(README: Journal and ledger).": ["Journal and ledger"],
        "(see README, Durability).": ["Durability"],
    }
    for text, names in cases.items():
        assert [cited for _, options in readme_citations(text) for cited in options[:1]] == names, text
    listed = readme_citations("doors (README: HTTP API, Durability, Auth).")
    assert listed == [
        (
            "README: HTTP API, Durability, Auth",
            ["HTTP API, Durability, Auth", "HTTP API", "Durability", "Auth"],
        )
    ]
    not_citations = (
        "COPY pyproject.toml README.md ./",
        "(the README's first command)",
        "see README.",
        'files = ["README", "CHANGELOG.md"]',
    )
    for text in not_citations:
        assert readme_citations(text) == [], text
    assert DOCS_PAGE_CITATION.findall('(``docs/doors/http.md``), docs/paired.md, "Ping"') == [
        "doors/http.md",
        "paired.md",
    ]
    assert DOCS_PAGE_CITATION.findall("https://github.com/o/r/blob/main/docs/x.md, site/docs/y.md") == []
    folded = FOLDED_LINE_BREAK.sub(" ", '# see (README, "Journal\n    # and ledger")')
    assert readme_citations(folded)[0][1] == ["Journal and ledger"]
    assert {"Set-up", "A five-minute tour"} <= markdown_headings(README.read_text())


def test_code_cites_only_docs_pages_and_readme_sections_that_exist() -> None:
    headings = markdown_headings(README.read_text())
    broken = []
    for path in code_files():
        text = FOLDED_LINE_BREAK.sub(" ", path.read_text(errors="replace"))
        where = path.relative_to(ROOT).as_posix()
        for page in DOCS_PAGE_CITATION.findall(text):
            if not (DOCS / page).is_file():
                broken.append(f"{where}: docs/{page} does not exist")
        for cited, names in readme_citations(text):
            # A list "X, Y" passes when it is one heading or when each of its parts is one.
            whole, *parts = names
            if whole not in headings and not (parts and all(part in headings for part in parts)):
                broken.append(f"{where}: {cited!r} is not a README.md heading; cite the docs page")
    assert broken == [], "\n".join(broken)


# --- settings -----------------------------------------------------------------------------------------------


def _models_in(annotation: Any) -> Iterator[tuple[type[BaseModel], str]]:
    """Models inside a field's type, each with the path suffix its values get: "" direct, ".<name>" for a
    dict's values, "[]" for a list's items."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, ""
    elif origin is dict and args:
        for model, suffix in _models_in(args[1]):
            yield model, ".<name>" + suffix
    elif origin is list and args:
        for model, suffix in _models_in(args[0]):
            yield model, "[]" + suffix
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _models_in(arg)


def settings_paths(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[str]:
    """Every field of the model, as documented: ``ingress.wait_replicas``, ``entities.<name>.replication``,
    ``ingress.api_keys[].sha256``, ``journal.prices`` (a dict of plain values stays one entry)."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for sub, suffix in _models_in(field.annotation):
            yield from settings_paths(sub, f"{path}{suffix}.")


def test_the_settings_walk_reaches_nested_models() -> None:
    paths = set(settings_paths())
    assert {"redis_url", "primary.connection_string", "entities.<name>.replication"} <= paths
    assert {"ingress.api_keys[].sha256", "receiver.window", "journal.prices"} <= paths
    assert len(paths) > 80


def test_every_setting_is_in_the_settings_page() -> None:
    page = (DOCS / "settings.md").read_text()
    missing = [path for path in settings_paths() if f"`{path}" not in page]
    assert missing == [], f"docs/settings.md lacks: {missing}"
