"""The repository explains itself: no tracked file cites a document outside it (a
specification's sections, an issue tracker's numbers), and every Markdown file a tracked
file links to or names exists."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()
# Third-party code shipped as it came, with its own references.
SKIPPED_FOLDERS = ("app/console/static/vendor/",)

# What reads as a citation of a document the repository does not hold: the product
# specification ("SPEC §3", "§12"), and an issue tracker's entries ("issue 14", "Issue
# 17's", "issues 14–21", "issue #3", and links to issues or pull requests). Words that
# only start alike ("issued", `find_spec`, `CronSpec`) are no citation.
CITATIONS = {
    "the specification": re.compile(r"\bSPEC\b"),
    "a section sign": re.compile("§"),
    "an issue number": re.compile(r"\bissues?\s+#?\d", re.IGNORECASE),
    "a link to an issue or pull request": re.compile(r"/(?:issues|pull)/\d"),
    # bench/RESULTS.md holds the current figures, rewritten round after round: cite the
    # file (or the figure itself), never one of its sections by name.
    "a section of bench/RESULTS.md": re.compile(r"RESULTS\.md(?:,\s*|\s*\(\s*)[\"\u201c]"),
}
# A link to a third-party project's own tracker, where a comment explains a workaround
# for one of its bugs, may stay: list the exact URL here. None is needed today.
ALLOWED_TRACKER_LINKS: frozenset[str] = frozenset()
_URL = re.compile(r"https?://[^\s)\"'>\]]+")

# A Markdown link to a Markdown file, relative to the file that holds it (an anchor or a
# title after the path is left out), and a bare mention of a page under docs/, relative
# to the repository's root.
_MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s<>#]+\.md)(?:#[^)\s]*)?>?(?:\s+\"[^\"]*\")?\s*\)")
_DOCS_MENTION = re.compile(r"(?<![\w./-])(docs/[\w./-]*\.md)\b")


def _tracked_text_files() -> Iterator[tuple[str, list[str]]]:
    """Every tracked text file but this one and vendored code: its path and its lines."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    for name in sorted(filter(None, listing.split("\0"))):
        if name == THIS_FILE or name.startswith(SKIPPED_FOLDERS):
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, or a link to a folder
            continue
        content = path.read_bytes()
        if b"\0" in content:
            continue
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:  # binary without a NUL in it
            continue
        yield name, text.splitlines()


def _citations(line: str) -> list[str]:
    """What in one line cites a document outside the repository."""
    for url in _URL.findall(line):
        if url.rstrip(".,;:") in ALLOWED_TRACKER_LINKS:
            line = line.replace(url, "")
    return [what for what, pattern in CITATIONS.items() if pattern.search(line)]


def _linked_markdown(name: str, line: str) -> Iterator[str]:
    """The repository paths of the Markdown files one line of `name` links to or names."""
    folder = PurePosixPath(name).parent
    for target in _MARKDOWN_LINK.findall(line):
        if "://" in target or target.startswith(("/", "mailto:")):
            continue
        yield _normalised(folder / target)
    for mention in _DOCS_MENTION.findall(line):
        yield _normalised(PurePosixPath(mention))


def _normalised(path: PurePosixPath) -> str:
    """`path` with its `.` and `..` steps taken; a path that climbs out of the repository
    keeps its leading `..`, and so names no file of it."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            else:
                parts.append(part)
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _report(findings: list[str]) -> str:
    shown = "\n".join(findings[:200])
    more = f"\n… and {len(findings) - 200} more" if len(findings) > 200 else ""
    return f"{len(findings)} found:\n{shown}{more}"


def test_the_patterns_catch_citations_and_spare_ordinary_words():
    assert _citations("as SPEC §3 says") == ["the specification", "a section sign"]
    assert _citations("(issue 14, point 2)") == ["an issue number"]
    assert _citations("Issue 17's run; issues 14–21; issue #3") == ["an issue number"]
    assert _citations("see https://github.com/org/project/issues/123") == [
        "a link to an issue or pull request"
    ]
    for ordinary in (
        "A lock id this service never issued holds nothing",
        "importlib.util.find_spec(name); spec = CronSpec(...)",
        "the console's issues list, a spec of the request",
        "decision 14 (docs/decisions/0014-per-key-locks-and-retry-delays.md)",
    ):
        assert _citations(ordinary) == [], ordinary


def test_the_links_resolve_as_markdown_and_the_docs_site_do():
    line = "[a](../decisions/0001-x.md#why) and docs/guide/cron.md, not `x/docs/y.md`"
    assert list(_linked_markdown("docs/guide/push.md", line)) == [
        "docs/decisions/0001-x.md",
        "docs/guide/cron.md",
    ]
    assert list(_linked_markdown("README.md", "[b](https://example.com/c.md)")) == []


def test_no_tracked_file_cites_a_document_outside_the_repository():
    findings = [
        f"{name}:{number}: {', '.join(what)}: {line.strip()[:120]}"
        for name, lines in _tracked_text_files()
        for number, line in enumerate(lines, start=1)
        if (what := _citations(line))
    ]
    assert not findings, (
        "say what is meant in the project's own words (a docs page or a decision record "
        "may hold it); " + _report(findings)
    )


def test_every_markdown_file_a_tracked_file_links_to_or_names_exists():
    findings = [
        f"{name}:{number}: {target} does not exist"
        for name, lines in _tracked_text_files()
        for number, line in enumerate(lines, start=1)
        for target in _linked_markdown(name, line)
        if not (ROOT / target).is_file()
    ]
    assert not findings, _report(findings)
