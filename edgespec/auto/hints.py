"""Replacements an instruction names ("rename `a` to `b`"), made by copies from the first
occurrence on: names, numbers and quoted text only, and no rename limited to one place."""

from __future__ import annotations

import re

# A name, number or quoted text: `x`, "x", 'x', or a bare word (a dot inside, not after it).
_ITEM = r"(`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+'|[A-Za-z_\d](?:[\w.]*\w)?)"
_RENAME = rf"(?:the\s+)?(?:\w+\s+)?{_ITEM}\s+(?:to|as|into)\s+{_ITEM}"
# Each form, and what may follow it with more ("rename `A` to `B` and `c` to `d`").
_FORMS = [
    (re.compile(form, re.IGNORECASE), re.compile(more, re.IGNORECASE) if more else None)
    for form, more in (
        (rf"\brename\s+{_RENAME}", rf",?\s+and\s+{_RENAME}"),
        (rf"\bfrom\s+{_ITEM}\s+to\s+{_ITEM}", ""),
        (
            rf"\breplace\s+(?:(?:all|every|each|the)\s+)*{_ITEM}\s+(?:with|by)\s+"
            rf"(?:(?:a|an|the)\s+)?{_ITEM}",
            "",
        ),
    )
]
# What makes a replacement local: "... in `remove_tree`".
_SCOPED = re.compile(rf"\s+(?:only\s+)?(?:in|inside|within)\s+(?:the\s+)?(?:\w+\s+)?{_ITEM}")
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


def _code(item: str) -> str | None:
    if item[0] in "`\"'":
        return item[1:-1]
    inner = item[1:]
    looks_like_code = item[0].isdigit() or any(
        c.isdigit() or c in "_." or c.isupper() for c in inner
    )
    return item if looks_like_code else None


def replacements(instruction: str) -> list[tuple[str, str]]:
    """The (old, new) texts the instruction asks to replace, in the order it names them."""
    text = _FENCED.sub("\n", instruction)
    found: list[tuple[int, str, str]] = []
    for form, more in _FORMS:
        for first in form.finditer(text):
            match: re.Match[str] | None = first
            while match is not None:
                old, new = _code(match.group(1)), _code(match.group(2))
                if old and new and old != new and not _scoped(text, match.end()):
                    found.append((match.start(), old, new))
                match = more.match(text, match.end()) if more is not None else None
    return list(dict.fromkeys((old, new) for _, old, new in sorted(found)))


def _scoped(text: str, at: int) -> bool:
    scope = _SCOPED.match(text, at)
    return scope is not None and _code(scope.group(1)) is not None
