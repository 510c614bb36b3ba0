"""The docs' code blocks, read as the examples they are (tests/docs/test_examples.py runs
them): which ones run, and how an answer a page shows is compared with the service's
(docs/development.md, "Examples")."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# What the docs' examples talk to; a test rewrites it to the service it started.
DOCUMENTED_URL = "http://127.0.0.1:8080"

_FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_MARKER = re.compile(r"<!--\s*(?P<kind>not run|run by):\s*(?P<what>.*?)\s*-->\s*$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SLEEP = re.compile(r"sleep \d+(\.\d+)?")
_EXPORT = re.compile(r"export (?P<name>HOURGLASS_\w+)=(?P<value>\S+)")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


# Where the TypeScript client's tests live: a "run by" may name one of them (a Node test
# file, run by `npm test` in .ci/run, not by pytest), which must read the page it runs.
NODE_TESTS = "clients/typescript/test/"


def node_test(what: str) -> str | None:
    """The Node test file a "run by" names (`clients/typescript/test/x.test.mjs`), if it
    names one rather than a pytest test."""
    file = what.partition("::")[0]
    return file if file.startswith(NODE_TESTS) and file.endswith(".test.mjs") else None


@dataclass
class Block:
    page: Path
    line: int  # of its opening fence, 1-based
    lang: str
    text: str
    marker: tuple[str, str] | None  # ("not run" | "run by", what), from the line before
    answer: Block | None = None  # the ```json answer shown right after a command
    is_answer: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        return [block for block in self.blocks if kind_of(block) in ("curl", "python", "file")]

    @property
    def environment(self) -> dict[str, str]:
        return {
            name: value
            for block in self.blocks
            if kind_of(block) == "environment"
            for name, value in environment(block).items()
        }


def read_page(path: Path) -> Page:
    text = path.read_text()
    page = Page(path)
    previous: Block | None = None
    previous_end = 0
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        block = Block(
            page=path,
            line=text.count("\n", 0, match.start()) + 1,
            lang=match["lang"],
            text=_dedent(match["body"], len(match["indent"])),
            marker=(marker["kind"], marker["what"]) if marker else None,
        )
        between = text[previous_end : match.start()]
        if (
            previous is not None
            and block.lang == "json"
            and block.marker is None
            and kind_of(previous) == "curl"
            and not between.strip()
        ):
            previous.answer = block
            block.is_answer = True
        page.blocks.append(block)
        previous, previous_end = block, match.end()
    return page


def _dedent(body: str, indent: int) -> str:
    return "".join(line[indent:] for line in body.splitlines(keepends=True))


def kind_of(block: Block) -> str:
    """What a block is: "marked" (its comment says what runs it, or why nothing does), "answer",
    "curl" (commands run against the service), "environment" (the service's, for the
    page), "python", "file" (a Python file later blocks
    use), or "unmarked" (a block a test cannot run, which must say why)."""
    if block.marker is not None:
        return "marked"
    if block.is_answer:
        return "answer"
    if block.lang in ("sh", "bash") and _is_curl_only(block.text):
        return "curl"
    if block.lang in ("sh", "bash") and environment(block):
        return "environment"
    if block.lang == "python":
        first = block.text.lstrip().split("\n", 1)[0]
        return "file" if re.fullmatch(r"# [\w/]+\.py", first) else "python"
    return "unmarked"


def _is_curl_only(text: str) -> bool:
    lines = [c.strip() for c in commands(text) if c.strip() and not c.lstrip().startswith("#")]
    curls = [c for c in lines if not _SLEEP.fullmatch(c)]  # a reader waits a moment too
    return bool(curls) and all(c.startswith("curl ") and DOCUMENTED_URL in c for c in curls)


def environment(block: Block) -> dict[str, str]:
    """The service's environment that a block of `export HOURGLASS_…=…` lines sets: the
    page's service starts with it."""
    found = [_EXPORT.fullmatch(line.strip()) for line in block.text.strip().splitlines()]
    if not found or not all(found):
        return {}
    return {match["name"]: match["value"] for match in found if match}


def commands(text: str) -> list[str]:
    """A shell block's commands: its lines, joined where a backslash or an open quote goes on."""
    commands, current, quote = [], [], ""
    for line in text.splitlines():
        current.append(line)
        for character in line:
            if quote and character == quote:
                quote = ""
            elif not quote and character in "'\"":
                quote = character
        if not quote and not line.endswith("\\"):
            commands.append("\n".join(current))
            current = []
    return commands + (["\n".join(current)] if current else [])


# The output a page shows for a print: a comment at the end of the line that prints.
_PRINTS = re.compile(r"^\s*print\(.*\)\s*#\s?(?P<shown>.+)$", re.MULTILINE)
_PRINTED_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def shown_prints(block: Block) -> list[str]:
    """What the page says a block prints, line by line (from `print(…)  # shown`)."""
    return [match["shown"].strip() for match in _PRINTS.finditer(block.text)]


def same_print(shown: str, printed: str) -> bool:
    """A printed line as the page shows it, but for times the service chose."""
    return _PRINTED_TIME.sub("<time>", shown) == _PRINTED_TIME.sub("<time>", printed.strip())


def file_name(block: Block) -> str:
    return block.text.lstrip().split("\n", 1)[0][2:]


def json_values(text: str) -> list[Any]:
    """The JSON values of a command's output (or of an answer a page shows), in order."""
    decoder = json.JSONDecoder()
    values, position = [], 0
    text = text.strip()
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        values.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return values


def mismatch(shown: Any, got: Any, bindings: dict[str, str], path: str = "") -> str | None:
    """Where the answer a page shows differs from the service's, or None. Ids and times the
    service chose may differ: a UUID the page shows stands for the one the service gave (the
    first time it appears; later commands use it), a time for any time; a string that ends
    with "…" for any string that begins with the rest."""
    if isinstance(shown, dict):
        if not isinstance(got, dict) or set(shown) != set(got):
            return f"{path or 'the answer'}: the page shows {sorted(shown) if isinstance(shown, dict) else shown!r}, the service {sorted(got) if isinstance(got, dict) else got!r}"
        for key in shown:
            found = mismatch(shown[key], got[key], bindings, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(shown, list):
        if not isinstance(got, list) or len(shown) != len(got):
            return f"{path}: the page shows {shown!r}, the service {got!r}"
        for index, (one, other) in enumerate(zip(shown, got, strict=True)):
            found = mismatch(one, other, bindings, f"{path}[{index}]")
            if found:
                return found
        return None
    if isinstance(shown, str) and isinstance(got, str):
        if _UUID.match(shown):
            if bindings.setdefault(shown, got) == got:
                return None
        elif (_TIME.match(shown) and _TIME.match(got)) or (
            shown.endswith("…") and got.startswith(shown[:-1])
        ):
            return None
    if shown == got and type(shown) is type(got):
        return None
    return f"{path or 'the answer'}: the page shows {shown!r}, the service {got!r}"


def bind(text: str, bindings: dict[str, str], url: str) -> str:
    """A block's text as it runs here: the service's own address and ids for the page's."""
    for shown, got in bindings.items():
        text = text.replace(shown, got)
    return text.replace(DOCUMENTED_URL, url)
