"""The kit's failure messages: what went wrong, in the manager's own terms, then the
calls that lead there as a script of Python the user can paste into a test."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# what a refused call must leave alone: (num_free_blocks, block table by sequence id)
PoolState = tuple[int, Mapping[int, Sequence[int]]]


def render(
    problem: str,
    script: list[str],
    marker: str = "# <- fails here",
    who: str = "`factory` builds your manager",
) -> str:
    """The failure message: what went wrong, then the calls that lead there."""
    lines = [f"    {line}" for line in script]
    if lines and marker:
        lines[-1] = f"{lines[-1]:<40} {marker}"
    return f"{problem}\n\nMinimal counterexample (paste into a test; {who}):\n" + "\n".join(lines)


def took(n: int) -> str:
    if n == 0:
        return "left the free count as it was"
    return f"took {n} block(s)" if n > 0 else f"gave back {-n} block(s)"


def hint(text: str, extra: int) -> str:
    """A guess at the cause, phrased as a question: `extra` blocks taken beyond the model."""
    if text.startswith("m.free_sequence"):
        return (
            " (did it free blocks another sequence still holds? fork must count the "
            "child's reference to every shared block)"
            if extra < 0
            else " (a leak: free must release every block whose count drops to 0)"
        )
    if text.startswith("m.fork"):
        return " (fork shares the parent's blocks; it needs no new ones)"
    return (
        " (too few: ceil(tokens / block_size) blocks, plus a copy when appending into a "
        "shared, partly filled last block)"
        if extra < 0
        else " (too many: ceil(tokens / block_size) blocks are enough)"
    )


def diff(before: PoolState, after: PoolState) -> str:
    parts: list[str] = []
    if before[0] != after[0]:
        parts.append(f"num_free_blocks went {before[0]} -> {after[0]}")
    for seq in before[1]:
        if before[1][seq] != after[1][seq]:
            parts.append(f"block_table({seq}) went {list(before[1][seq])} -> {list(after[1][seq])}")
    return "; ".join(parts)
