"""One COPY text line from an audit record in one generated function call, for the rows the webhook writes.

`row_encode` (encoding.py) is on the request path of every audited admission. Encoding a row's own fields
column by column through maps, type checks, str() and a reordering cost about 54,000 instructions a row
(callgrind; docs/benchmarks.md, "The row's line in one call"), more than building the record. The function
made here does the same for the usual record in one frame: it reads each column, checks that the value is
one the line can hold as it stands (a str within its column's limit, an int or a float, a bool), checks the
texts once for the characters COPY escapes, and formats the whole line with one f-string, in the table's
order. Anything else (None, another type, a text too long, a character to escape) returns None, and the
caller encodes the row column by column as before: the two give the same bytes.

The function's source is generated once per set of columns, as dataclasses and namedtuple generate
theirs: a loop over the columns at run time is what this replaces. Column names are the model's field
names (identifiers); every other value reaches the source through `repr` or the function's globals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

# A record's line, with its newline, given its shared columns' texts run by run; None: not the usual record.
LineFunction: TypeAlias = Callable[[dict[str, Any], Sequence[str]], "str | None"]

_VALUE_TYPES = frozenset({str, int, float})  # format() of these, with no spec, is str() of them


def line_function(columns: Sequence[tuple[str, str, int | None, object, Callable[[object], str] | None]],
                  shared: frozenset[str], special_in: Callable[[str], bool]) -> tuple[LineFunction, list[list[str]]]:
    """The generated line function for the table's `columns` (name, kind, limit, default, encoder: in the
    table's order), of which those named in `shared` come as texts, and the runs of consecutive shared
    columns (names, in order) whose texts, joined by tabs, are the function's second argument. `special_in`:
    whether a text holds a character COPY escapes or drops (the line is then left to the caller)."""
    reads: list[str] = []
    checks: list[str] = []
    checked: list[str] = []
    formats: list[str] = []
    parts: list[str] = []
    runs: list[list[str]] = []
    names: dict[str, object] = {"VALUE_TYPES": _VALUE_TYPES, "BOOL": ("f", "t"), "SPECIAL_IN": special_in}
    previous_shared = False
    for i, (name, kind, limit, default, encoder) in enumerate(columns):
        if name in shared:
            if not previous_shared:
                parts.append(f"{{runs[{len(runs)}]}}")
                runs.append([])
            runs[-1].append(name)
            previous_shared = True
            continue
        previous_shared = False
        names[f"D{i}"] = default
        reads.append(f"    v{i} = get({name!r}, D{i})")
        if kind == "text":
            checks.append(f"type(v{i}) is str" + (f" and len(v{i}) <= {int(limit)}" if limit is not None else ""))
            checked.append(f"{{v{i}}}")
            parts.append(f"{{v{i}}}")
        elif kind == "value":  # formatted once (a float's text costs more than the rest of its column)
            checks.append(f"type(v{i}) in VALUE_TYPES")
            formats.append(f"    v{i} = f'{{v{i}}}'")
            checked.append(f"{{v{i}}}")
            parts.append(f"{{v{i}}}")
        elif kind == "bool":
            checks.append(f"type(v{i}) is bool")
            parts.append(f"{{BOOL[v{i}]}}")
        else:  # compressed, json: the column's own encoder, which escapes what it writes
            assert encoder is not None
            names[f"E{i}"] = encoder
            parts.append(f"{{E{i}(v{i})}}")
    body = ["def line(record, runs):", "    get = record.get", *reads]
    if checks:
        body.append(f"    if not ({' and '.join(checks)}):")
        body.append("        return None")
    body.extend(formats)
    if checked:
        body.append(f"    if SPECIAL_IN(f{''.join(checked)!r}):")
        body.append("        return None")
    body.append(f"    return f{chr(9).join(parts) + chr(10)!r}")
    exec("\n".join(body), names)  # noqa: S102 - source built above from the model's column names and repr()s
    function: LineFunction = names["line"]  # type: ignore[assignment]
    return function, runs
