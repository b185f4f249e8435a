"""Read docs/webhooks.md: the test vectors, header variants and catalog table it publishes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from prefctl.webhooks import catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
EMPTY = "(empty)"


def text() -> str:
    return DOC.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Vector:
    fields: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.fields[key]


def vectors(doc: str, marker: str = "vector") -> list[Vector]:
    """Each ```text block that follows a ``<!-- vector -->`` marker (or ``<!-- MARKER -->``), as
    ``Key: value`` fields."""
    blocks = re.findall(rf"<!-- {marker} -->\s*```text\n(.*?)```", doc, re.S)
    out = []
    for block in blocks:
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        out.append(Vector(fields))
    return out


def section(doc: str, marker: str) -> str:
    """The text between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``."""
    match = re.search(rf"<!-- {marker}:begin -->\n(.*?)<!-- {marker}:end -->", doc, re.S)
    if match is None:
        raise AssertionError(f"docs/webhooks.md has no {marker} section")
    return match.group(1)


def accepted_headers(doc: str) -> list[str]:
    block = re.search(r"```text\n(.*?)```", section(doc, "headers-accepted"), re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def rejected_headers(doc: str) -> list[tuple[str, str]]:
    """``(header value, reason)`` rows of the rejected-variants table."""
    rows = []
    for line in section(doc, "headers-rejected").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith(("`", EMPTY)):
            continue
        value = "" if cells[0] == EMPTY else cells[0].strip("`")
        rows.append((value, cells[1].strip("`")))
    return rows


def catalog_table() -> str:
    """The event catalog as the Markdown table docs/webhooks.md must hold."""
    lines = [
        "| Event type | Entity | Filter key (all) | PreviousData |",
        "|---|---|---|---|",
    ]
    for event_type in catalog.ALL_TYPES:
        key = catalog.filter_key(event_type.entity)
        key_text = f"`{key.name}` (`{key.wildcard}`)" if key else "— (global)"
        previous = "yes" if event_type.has_previous_data else "no"
        lines.append(f"| `{event_type.name}` | {event_type.entity} | {key_text} | {previous} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(catalog_table(), end="")
