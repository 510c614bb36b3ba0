"""One router per resource: messages, locks, queues, health; and the `path` convertor
their keys and names use."""

from __future__ import annotations

from starlette import convertors


class PathConvertor(convertors.PathConvertor):
    """The rest of the path, `/` and line feeds included (`{key:path}`).

    Starlette's own stops at a line feed (its `.` does not match one), so a key with one
    matched no route (a 404 no operation documents) or, at the end of the path, lost it
    (`k%0A` offered `k`); this one hands every character to the key's pattern, which
    answers 422. It takes the name `path`, for the whole process, before any route here
    is built: route templates are labels of `/metrics` (`{key:path}`), which stay as they
    were. The console's and the static files' `path` routes take such paths too, and
    answer them as any other (the page; 404).
    """

    regex = "(?s:.*)"


convertors.register_url_convertor("path", PathConvertor())
