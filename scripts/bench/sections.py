"""What the benchmark scripts share: a paragraph wrapped as BENCHMARKS.md wraps them, and a section's generated part
(its heading to the end of its first table) replaced in a document, or the section added at its end."""

import textwrap


def paragraph(text):
    """`text` in lines of at most 120 characters."""
    return textwrap.fill(text, 120, break_on_hyphens=False, break_long_words=False)


def with_section(document, heading, section):
    """`document` with the generated part of the section under `heading` (heading to the end of its first table)
    replaced by `section`, or `section` added at the end."""
    start = document.find(heading)
    if start < 0:
        return document.rstrip() + "\n\n" + section
    offset, in_table = start, False
    for line in document[start:].splitlines(keepends=True):
        if in_table and not line.startswith("|"):
            break
        in_table |= line.startswith("|")
        offset += len(line)
    return document[:start] + section.rstrip() + "\n" + document[offset:]
