"""How `python -m cuda_kernels.report` prints its rows: a fixed-width table (`table`), the
README's decode/prefill table (`markdown`, header held to MARKDOWN_HEADS by a test) or the
ladder's (`ladder_table`). A missing figure prints as "-", never as a made-up number.
"""

from __future__ import annotations

COLUMNS = (  # (row key, header, width, format) of the default table
    ("kernel", "kernel", 44, "s"),
    ("arch", "arch", 6, "s"),
    ("registers", "regs", 5, "d"),
    ("shared_bytes", "smem B", 7, "d"),
    ("spill_bytes", "spill", 6, "d"),
    ("global_load_bits", "ldbit", 5, "d"),
    ("shuffles", "shfl", 5, "d"),
    ("barriers", "bar", 4, "d"),
    ("loop_sass", "loop", 6, "d"),
    ("sass_per_kv_byte", "sass/B", 8, ".3f"),
    ("hmma", "hmma", 5, "d"),
    ("loop_sass_per_hmma", "sass/mma", 7, ".1f"),
    ("ctas_per_sm", "CTA/SM", 5, "d"),
    ("warps_per_sm", "warp/SM", 5, "d"),
    ("reuse", "reuse", 6, ".1f"),
    ("bound", "bound", 7, "s"),
    ("expected_pct_of_peak", "%peak", 6, ".1f"),
    ("expected_pct_of_tensor_peak", "%tensor", 7, ".2f"),
)

# (row key, Markdown header, format) of the README table
MARKDOWN = (
    ("kernel", "kernel", "s"),
    ("arch", "arch", "s"),
    ("registers", "registers", "d"),
    ("spill_bytes", "spills (B)", "d"),
    ("warps_per_sm", "warps/SM", "d"),
    ("loop_sass", "loop SASS", "d"),
    ("sass_per_kv_byte", "SASS per K/V byte", ".3f"),
    ("hmma", "HMMA", "d"),
    ("loop_sass_per_hmma", "SASS per HMMA", ".2f"),
    ("ldsm", "LDSM", "d"),
    ("ldgsts", "LDGSTS", "d"),
    ("reuse", "K/V reuse", ".1f"),
    ("flops_per_hbm_byte", "FLOP per HBM byte", ".0f"),
    ("bound", "bound", "s"),
    ("expected_pct_of_peak", "% of own peak", ".1f"),
    ("expected_pct_of_tensor_peak", "% of tensor peak", ".1f"),
)
MARKDOWN_HEADS = tuple(head for _, head, _ in MARKDOWN)
MARKDOWN_KERNELS = ("paged_decode", "paged_prefill")  # name prefixes the README shows


def cell(row: dict, key: str, form: str) -> str:
    """row[key] formatted, or "-" when the row has no such figure."""
    return "-" if row.get(key) is None else f"{row[key]:{form}}"


def table(rows: list[dict]) -> str:
    head = " ".join(f"{h:{w}}" if f == "s" else f"{h:>{w}}" for _, h, w, f in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        align = {k: "" if f == "s" and r.get(k) is not None else ">" for k, _, _, f in COLUMNS}
        cells = [f"{cell(r, k, f):{align[k]}{w}}" for k, _, w, f in COLUMNS]
        lines.append(" ".join(cells))
    return "\n".join(lines)


LADDER = (
    ("kernel", "rung", "s"),
    ("arch", "arch", "s"),
    ("kernel_lines", "kernel lines", "d"),
    ("lines_changed", "lines changed from the rung before", "d"),
    ("registers", "registers", "d"),
    ("spill_bytes", "spills (B)", "d"),
    ("loop_kv_bits", "K/V load bits", "d"),
    ("ldg128", "LDG.128", "d"),
    ("ldgsts", "LDGSTS", "d"),
    ("hmma", "HMMA", "d"),
    ("loop_sass", "loop SASS", "d"),
    ("loop_kv_bytes", "K/V B per trip", "d"),
    ("loop_inner_loops", "inner loops", "d"),
    ("sass_per_kv_byte", "SASS per K/V byte", ".3f"),
    ("leaner", "x leaner than rung 1", ".1f"),
    ("cache_reads", "K/V reads (G=4)", ".1f"),
    ("sass_per_cache_byte", "SASS per cache byte", ".3f"),
)


def ladder_table(rows: list[dict]) -> str:
    """One Markdown line per rung and arch; leaner = rung 1's sass_per_kv_byte / the row's."""
    first = {r["arch"]: r["sass_per_kv_byte"] for r in rows if r["kernel"].startswith("rung1.")}

    def leaner(r: dict) -> float | None:
        base, mine = first.get(r["arch"]), r.get("sass_per_kv_byte")
        return base / mine if base and mine else None

    return markdown_table(LADDER, [dict(r, leaner=leaner(r)) for r in rows])


# cuda_kernels/README.md's generated tables, each between its two marker lines: the kernels'
# decode/prefill table (`report --readme`) and the ladder's (`report --ladder --readme`)
BLOCKS = {
    "kernel": (
        "<!-- kernel table: python -m cuda_kernels.report --readme -->",
        "<!-- end of the kernel table -->",
    ),
    "ladder": (
        "<!-- ladder table: python -m cuda_kernels.report --ladder --readme -->",
        "<!-- end of the ladder table -->",
    ),
}


def readme_block(name: str, rows: list[dict]) -> str:
    """The README's `name` table ("kernel" or "ladder") of the sm_90(a) rows, with its markers."""
    rows = [r for r in rows if r["arch"] in ("sm_90", "sm_90a")]
    body = markdown(rows) if name == "kernel" else ladder_table(rows)
    begin, end = BLOCKS[name]
    return "\n".join([begin, body, end])


def replace_block(text: str, name: str, block: str) -> str:
    begin, end = BLOCKS[name]
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[:start] + block + text[stop:]


def markdown_row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_table(columns: tuple, rows: list[dict]) -> str:
    """A Markdown table of `rows`, one column per (row key, header, format)."""
    lines = [markdown_row(h for _, h, _ in columns), markdown_row("---" for _ in columns)]
    lines += [markdown_row(cell(r, k, f) for k, _, f in columns) for r in rows]
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    """The README's table of the decode and prefill rows (static counts, no GPU)."""
    shown = [r for r in rows if r["kernel"].startswith(MARKDOWN_KERNELS)]
    return markdown_table(MARKDOWN, [dict(r, kernel=f"`{r['kernel']}`") for r in shown])


def table_heads(text: str) -> list[tuple[str, ...]]:
    """The header cells of every Markdown table in `text` (the lines above |---|)."""

    def cells(line: str) -> tuple[str, ...]:
        return tuple(c.strip() for c in line.strip().strip("|").split("|"))

    lines = text.splitlines()
    return [
        cells(above)
        for above, line in zip(lines, lines[1:], strict=False)
        if line.lstrip().startswith("|") and all(c and set(c) <= set("-:") for c in cells(line))
    ]
