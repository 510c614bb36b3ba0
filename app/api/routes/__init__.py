"""One router per resource: messages, locks, queues, health; and the `text` path convertor
their keys and names use."""

from __future__ import annotations

from starlette.convertors import PathConvertor, register_url_convertor


class TextConvertor(PathConvertor):
    """The rest of the path, `/` and control characters included (`{key:text}`).

    Starlette's `path` stops at a line feed (its `.` does not match one), so a key with
    one matched no route (a 404 no operation documents) or, at the end of the path, lost
    it; this one hands every character to the key's own pattern, which answers 422.
    """

    regex = "(?s:.*)"


register_url_convertor("text", TextConvertor())
