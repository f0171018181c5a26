"""What the benchmark scripts share: text wrapped as BENCHMARKS.md wraps it, and a section's generated part (its
heading to the end of its first table) replaced in a document, or the section added at its end."""


def paragraph(text):
    """`text` as one paragraph of lines of at most 120 characters."""
    return wrapped(text, "").rstrip("\n")


def wrapped(text, indent):
    """`text` as benches/support's `wrapped` writes it: lines of at most 120 characters (a longer word on its own),
    those after the first starting with `indent`, none starting with a word that would start a markdown block there
    (the line before it runs longer instead); the last line break included."""
    lines, line = [], ""
    for word in text.split():
        if line.strip() and len(line) + 1 + len(word) > 120 and not opens_block(word):
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + word
    return "\n".join(lines + [line]) + "\n"


def opens_block(word):
    """Whether `word` at the start of a line would start a markdown block: a list item, a heading, a quote or a
    setext underline."""
    number = word[:-1] if word[-1:] in (".", ")") else ""
    return word in ("+", "-", "*") or word.startswith(("#", ">", "=")) or (number.isdigit() and number.isascii())


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
