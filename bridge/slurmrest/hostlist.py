"""Slurm hostlist expressions: ``b42-[0-1,5]``, ``n[001-003]``, ``r[1-2]n[1-2]``, ``a,b[1-2]``.

slurmrestd hands node sets to us in this compressed form (a job's ``nodes``, v0.0.38's
``required_nodes``), and the bridge compares them with the exact names of the slurmd pods it
started, so both directions must be exact. Zero padding follows Slurm: the width of a range's
lower bound is the width of every number in it. Expansion is bounded so that a hostile or absurd
expression cannot make the bridge allocate millions of strings.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

__all__ = ["HostlistError", "compress", "expand"]

DEFAULT_LIMIT = 100_000
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")
_FORBIDDEN = frozenset("[],")


class HostlistError(ValueError):
    """The expression is malformed or expands to more names than allowed."""


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    parts.append(expr[start:])
    return parts


def _expand_range(body: str, expr: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {item!r} in {expr!r}")
        if not sep:
            values.append(lo)
            continue
        start, stop = int(lo), int(hi)
        if stop < start:
            raise HostlistError(f"descending range {item!r} in {expr!r}")
        width = len(lo)
        values.extend(str(n).zfill(width) for n in range(start, stop + 1))
    return values


def _expand_one(part: str, expr: str) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", part)
    choices: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("[") and piece.endswith("]"):
            choices.append(_expand_range(piece[1:-1], expr))
        elif "[" in piece or "]" in piece:
            raise HostlistError(f"unbalanced brackets in {expr!r}")
        elif piece:
            choices.append([piece])
    return ["".join(combo) for combo in itertools.product(*choices)]


def expand(expr: str, *, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Every host name of ``expr`` in order; ``""`` gives ``[]``. Raises HostlistError."""
    expr = expr.strip()
    if not expr or expr == "(null)":
        return []
    names: list[str] = []
    for raw_part in _split_top_level(expr):
        part = raw_part.strip()
        if not part:
            continue
        size = 1
        for body in re.findall(r"\[([^\]]*)\]", part):
            size *= _range_size(body, expr)
        if len(names) + size > limit:
            raise HostlistError(f"{expr!r} expands to more than {limit} names")
        names.extend(_expand_one(part, expr))
    return names


def _range_size(body: str, expr: str) -> int:
    total = 0
    for item in body.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {item!r} in {expr!r}")
        total += int(hi) - int(lo) + 1 if sep else 1
    return max(total, 0)


def compress(names: Iterable[str]) -> str:
    """A sorted, de-duplicated expression whose expansion is exactly the set of ``names``.

    Only a trailing run of digits is ranged (as Slurm does for one-dimensional names). A run with
    a leading zero keeps its width; runs without one are grouped separately, so expansion gives
    back every name exactly.
    """
    plain: set[str] = set()
    groups: dict[tuple[str, int], set[int]] = {}
    for name in names:
        if not name or _FORBIDDEN & set(name) or name != name.strip():
            raise HostlistError(f"cannot put {name!r} in a hostlist expression")
        m = _TRAILING_DIGITS.match(name)
        if m is None:
            plain.add(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        width = len(digits) if len(digits) > 1 and digits.startswith("0") else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    # a number without leading zero fits a padded group whose width it reaches (n[098-100])
    for (prefix, width), numbers in list(groups.items()):
        if width:
            continue
        widths = sorted((w for p, w in groups if p == prefix and w), reverse=True)
        for n in list(numbers):
            target = next((w for w in widths if len(str(n)) >= w), None)
            if target is not None:
                numbers.discard(n)
                groups[(prefix, target)].add(n)
        if not numbers:
            del groups[(prefix, width)]
    out: list[tuple[str, int, str]] = [(n, -1, n) for n in plain]
    for (prefix, width), numbers in groups.items():
        ranges = _ranges(sorted(numbers))
        text = ",".join(
            _fmt(lo, width) if lo == hi else f"{_fmt(lo, width)}-{_fmt(hi, width)}" for lo, hi in ranges
        )
        single = len(ranges) == 1 and ranges[0][0] == ranges[0][1]
        out.append((prefix, width, f"{prefix}{text}" if single else f"{prefix}[{text}]"))
    return ",".join(text for _, _, text in sorted(out))


def _fmt(n: int, width: int) -> str:
    return str(n).zfill(width)


def _ranges(numbers: list[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for n in numbers:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], n)
        else:
            ranges.append((n, n))
    return ranges
