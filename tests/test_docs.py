"""The docs can be checked: pages within their size caps, every benchmark record they name in
`benchmarks/results/`, only the latest record of each kind kept there, every relative link (and
its `#section`) resolving, and every benchmark script naming the docs table it feeds."""

import re
import unicodedata

import pytest

from repo_paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
RESULTS = REPO_ROOT / "benchmarks" / "results"
SCRIPTS = sorted(
    path for path in (REPO_ROOT / "benchmarks").iterdir() if path.suffix in (".py", ".sh")
)
# A record's name: its kind, then the UTC minute it was written (`benchmarks/*.py --out`'s default).
RECORD = re.compile(r"([A-Za-z][\w-]*?)-(\d{4}-\d\d-\d\dT\d{4}Z)\.(?:jsonl|txt)")
# A Markdown link or image, `[text](target)`, whose target is no URL.
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)\s]+)\)")
# A reference to a docs section from a script or a code comment: `docs/PAGE.md#section`.
SECTION_REFERENCE = re.compile(r"docs/([A-Z_]+\.md)#([\w-]+)")


def relative(path) -> str:
    return str(path.relative_to(REPO_ROOT))


def anchor(heading) -> str:
    """GitHub's anchor for a heading: lower case, punctuation and symbols dropped (letters,
    digits, `_`, `-` and spaces kept), spaces as hyphens."""
    kept = (c for c in heading.strip().lower() if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def anchors(page) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {anchor(heading) for heading in headings}


def test_anchors_are_githubs():
    assert anchor("Multi30k EN→DE, test_2016_flickr (1,000 sentences)") == (
        "multi30k-ende-test_2016_flickr-1000-sentences"
    )
    assert anchor("Constituency parsing (§6.3)") == "constituency-parsing-63"


def test_the_readme_reads_in_five_minutes():
    assert README.stat().st_size <= 10_000, "README.md is over its 10 KB cap"


@pytest.mark.parametrize("page", DOCS, ids=relative)
def test_each_docs_page_is_within_its_cap(page):
    assert page.stat().st_size <= 15_000, f"{relative(page)} is over its 15 KB cap: split it"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_record_a_page_names_is_kept(page):
    named = {match.group(0) for match in RECORD.finditer(page.read_text(encoding="utf-8"))}
    missing = sorted(name for name in named if not (RESULTS / name).is_file())
    assert not missing, f"{relative(page)} names records not in benchmarks/results/: {missing}"


def test_only_the_latest_record_of_each_kind_is_kept():
    kinds = {}
    for path in RESULTS.iterdir():
        match = RECORD.fullmatch(path.name)
        assert match, f"{path.name} is not named KIND-YYYY-MM-DDTHHMMZ.jsonl"
        kinds.setdefault(match.group(1), []).append(path.name)
    repeated = {kind: names for kind, names in kinds.items() if len(names) > 1}
    assert not repeated, f"older records to leave to git: {repeated}"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        path, _, section = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif section and linked.suffix == ".md" and section not in anchors(linked):
            broken.append(target)
    assert not broken, f"{relative(page)} links to what is not there: {broken}"


@pytest.mark.parametrize("script", SCRIPTS, ids=relative)
def test_each_benchmark_names_the_table_it_feeds(script):
    references = SECTION_REFERENCE.findall(script.read_text(encoding="utf-8"))
    assert references, f"{relative(script)} names no docs table (`Table: docs/PAGE.md#section`)"
    for page, section in references:
        assert section in anchors(REPO_ROOT / "docs" / page), f"{page}#{section} is no section"
