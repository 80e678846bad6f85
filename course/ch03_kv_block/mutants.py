"""Known-buggy variants of the reference solutions: the mistakes the checks must catch.

Each mutant is a small patch of one solution file: `old` must occur exactly once in
it and is replaced by `new`. `pagedsim check --mutants` writes every patched file to a
temporary folder, runs the exercise's checks against it, and fails unless some check
fails (the mutant is "caught"); it also runs each unpatched solution, which must pass.
course/INSTRUCTORS.md lists the same mutants (never the students' README: it would spoil
the exercises). The last group are wrong attempts that a student trying the course
really made and that once passed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    exercise: str  # curriculum id
    name: str  # short snake_case name, shown in the table
    mistake: str  # the mistake in one sentence
    old: str  # text in the solution (must occur exactly once)
    new: str  # what the buggy version says instead
    # words the first failure's message must contain (the true cause), if given; " | " separates
    # alternatives, for a bug that shows either as a wrong value or as an exception it causes
    says: str = ""


def apply(m: Mutant, source: str) -> str:
    found = source.count(m.old)
    if found != 1:
        raise ValueError(
            f"mutant {m.exercise}/{m.name}: its patch matches {found} places in the solution"
        )
    return source.replace(m.old, m.new)


def for_exercise(exercise_id: str) -> list[Mutant]:
    return [m for m in MUTANTS if m.exercise == exercise_id]


def right_for_exercise(exercise_id: str) -> list[Mutant]:
    """Correct solutions written differently (RIGHT): each must pass every check."""
    return [m for m in RIGHT if m.exercise == exercise_id]


M = Mutant
MUTANTS: list[Mutant] = [
    # 3.4a: the free list
    M(
        "3.4a",
        "free_ignores_the_count",
        "free() puts the block back even though another owner holds it",
        "        self.ref[b] -= 1\n        if not self.ref[b]:\n            self._push(b)",
        "        self.ref[b] -= 1\n        self._push(b)",
    ),
    M(
        "3.4a",
        "double_free_accepted",
        "free() of an already-free block is not refused",
        '        if not self.ref[b]:\n            raise PoolError(f"block {b} is already free '
        '(double free)")\n',
        "",
    ),
    M(
        "3.4a",
        "unlink_loses_a_block",
        "_unlink() joins prev[b] to next[next[b]], dropping b's neighbour",
        "        self.next[p] = n\n        self.prev[n] = p\n",
        "        self.next[p] = self.next[n]\n        self.prev[self.next[n]] = p\n",
    ),
    M(
        "3.4a",
        "incref_of_a_free_block_accepted",
        "incref() shares a block that nobody holds",
        '        if not self.ref[b]:\n            raise PoolError(f"block {b} is free; allocate it '
        'before sharing it")\n',
        "",
    ),
]
MUTANTS += [
    # 3.3: translation and paged attention
    M(
        "3.3",
        "block_count_floor",
        "the block count is tokens // block_size, dropping a partly filled block",
        "    return -(-num_tokens // block_size)",
        "    return num_tokens // block_size",
    ),
    M(
        "3.3",
        "slot_wrong_stride",
        "the slot multiplies the offset, not the block, by block_size",
        "    return block * block_size + offset",
        "    return offset * block_size + block",
    ),
    M(
        "3.3",
        "logical_used_as_physical",
        "locate() returns the logical block and never reads the table",
        "    return int(block_table[logical]), offset",
        "    return logical, offset",
    ),
    M(
        "3.3",
        "softmax_without_max",
        "softmax calls exp() on raw logits, which overflows when they are large",
        "    logits -= logits.max(axis=1, keepdims=True)  # exp of large logits would overflow\n",
        "",
    ),
    M(
        "3.3",
        "gqa_wrong_kv_head",
        "query head h reads KV head h % H_kv instead of h // (H // H_kv)",
        "kv_head = np.arange(num_heads) // (num_heads // num_kv_heads)",
        "kv_head = np.arange(num_heads) % num_kv_heads",
    ),
]
MUTANTS += [
    # 3.4b: fork and copy-on-write
    M(
        "3.4b",
        "fork_without_incref",
        "fork copies the table but never increments the ref counts",
        "    for b in child:\n        pool.incref(b)\n",
        "",
    ),
    M(
        "3.4b",
        "copy_on_write_skipped",
        "appending writes into a shared, partly filled block",
        "    elif pool.ref_count(table[-1]) > 1:",
        "    elif False:",
    ),
    M(
        "3.4b",
        "cow_keeps_the_source",
        "copy-on-write never lets go of the shared block (a leak)",
        "        pool.free(src)\n",
        "",
    ),
    M(
        "3.4b",
        "copy_pair_reversed",
        "the copy pair is recorded as (dst, src)",
        "        copies.append((src, dst))",
        "        copies.append((dst, src))",
    ),
    M(
        "3.4b",
        "free_table_forgets_the_last_block",
        "free_table releases every block but the last",
        "    for b in reversed(table):",
        "    for b in reversed(table[:-1]):",
    ),
]
MUTANTS += [
    # 3.1: first fit
    M(
        "3.1",
        "best_fit_instead",
        "allocate picks the smallest hole that fits, not the first",
        "        for i, (start, hole) in enumerate(self.holes):\n            if hole >= size:",
        "        fitting = [(h, i) for i, (s, h) in enumerate(self.holes) if h >= size]\n"
        "        for i, (start, hole) in [(i, self.holes[i]) for _, i in sorted(fitting)[:1]]:\n"
        "            if hole >= size:",
    ),
    M(
        "3.1",
        "exact_fit_refused",
        "a hole exactly the size of the request is skipped (> instead of >=)",
        "            if hole >= size:",
        "            if hole > size:",
    ),
    M(
        "3.1",
        "free_without_merging",
        "free inserts the range but never merges it with touching holes",
        "        self.holes.insert(i, (start, size))\n",
        "        self.holes.insert(i, (start, size))\n        return\n",
    ),
    M(
        "3.1",
        "fragmentation_of_no_free_space",
        "external_fragmentation of an empty hole list crashes instead of returning 0",
        "    return 1.0 - max(size for _, size in holes) / free if free else 0.0",
        "    return 1.0 - max(size for _, size in holes) / free",
    ),
]
MUTANTS += [
    # 3.2: block layout
    M(
        "3.2",
        "bytes_without_k_and_v",
        "bytes per block counts K only (forgets the factor 2)",
        "    return block_size * num_layers * 2 * num_kv_heads * head_dim * dtype_bytes",
        "    return block_size * num_layers * num_kv_heads * head_dim * dtype_bytes",
    ),
    M(
        "3.2",
        "bytes_without_dtype",
        "bytes per block counts elements, not bytes",
        "    return block_size * num_layers * 2 * num_kv_heads * head_dim * dtype_bytes",
        "    return block_size * num_layers * 2 * num_kv_heads * head_dim",
    ),
    M(
        "3.2",
        "strides_from_the_left",
        "strides are running products from the left (Fortran order)",
        "    for size in reversed(shape):\n        out.append(step)\n        step *= size\n    "
        "return tuple(reversed(out))",
        "    for size in shape:\n        out.append(step)\n        step *= size\n    return "
        "tuple(out)",
    ),
    M(
        "3.2",
        "slot_split_by_head_dim",
        "the slot is split with head_dim instead of block_size (wrong stride)",
        "    block, token = divmod(slot, shape[4])",
        "    block, token = divmod(slot, shape[5])",
    ),
]
MUTANTS += [
    # 3.5: block size
    M(
        "3.5",
        "block_count_floor",
        "a sequence's blocks are counted as tokens // block_size",
        "    return sum(-(-n // block_size) * block_size - n for n in lengths)",
        "    return sum(n // block_size * block_size - n for n in lengths)",
    ),
    M(
        "3.5",
        "extra_block_when_full",
        "a sequence that fills its last block exactly is given one more",
        "    return sum(-(-n // block_size) * block_size - n for n in lengths)",
        "    return sum((n // block_size + 1) * block_size - n for n in lengths)",
    ),
    M(
        "3.5",
        "smallest_block_chosen",
        "the candidates are tried from the smallest up",
        "    for bs in sorted(candidates, reverse=True):",
        "    for bs in sorted(candidates):",
    ),
    M(
        "3.5",
        "budget_ignored",
        "the choice never compares the memory needed with the budget",
        "        if allocated * bytes_per_token <= budget_bytes and waste_fraction",
        "        if waste_fraction",
    ),
]
MUTANTS += [
    # 3.7: alignment and the concurrent pop
    M(
        "3.7",
        "align_rounds_down",
        "align_up rounds down, so a block overlaps the next one",
        "    return (nbytes + alignment - 1) & ~(alignment - 1)",
        "    return nbytes & ~(alignment - 1)",
    ),
    M(
        "3.7",
        "align_pads_aligned_sizes",
        "align_up adds a whole extra step to sizes already aligned",
        "    return (nbytes + alignment - 1) & ~(alignment - 1)",
        "    return (nbytes + alignment) & ~(alignment - 1)",
    ),
    M(
        "3.7",
        "starts_not_aligned",
        "block i starts at i * block_bytes, ignoring the alignment",
        "    stride = align_up(block_bytes, alignment)",
        "    stride = block_bytes",
    ),
    M(
        "3.7",
        "pop_not_atomic",
        "the pop reads top and writes top - 1 as two separate steps",
        "        old = cuda.atomic.sub(top, 0, 1)",
        "        old = top[0]\n        top[0] = old - 1",
    ),
    M(
        "3.7",
        "pop_ignores_an_empty_stack",
        "a thread that finds the stack empty still reads free_stack[old - 1]",
        "        if old > 0:\n            out[i] = free_stack[old - 1]",
        "        if True:\n            out[i] = free_stack[old - 1]",
    ),
]
MUTANTS += [
    # 3.6: the flow diagram
    M(
        "3.6",
        "free_and_used_colours_swapped",
        "free blocks are painted in the used colour and vice versa",
        "facecolor=USED_COLOUR if count else FREE_COLOUR",
        "facecolor=FREE_COLOUR if count else USED_COLOUR",
    ),
    M(
        "3.6",
        "arrow_to_the_logical_index",
        "each arrow points at the block with the logical index, not the physical id",
        '            ax.annotate("", xy=pool_xy(b),',
        '            ax.annotate("", xy=pool_xy(i),',
    ),
    M(
        "3.6",
        "shared_count_not_shown",
        "every used block is labelled 1, so sharing is invisible",
        "            ax.text(x, y - 0.1, str(count),",
        "            ax.text(x, y - 0.1, str(1),",
    ),
    M(
        "3.6",
        "free_list_sorted",
        "the free list is written in block order instead of allocation order",
        '    order = " -> ".join(map(str, snapshot.free_list))',
        '    order = " -> ".join(map(str, sorted(snapshot.free_list)))',
    ),
]
MUTANTS += [
    M(
        "3.4a",
        "allocate_walks_the_list",
        "allocate() builds the whole free list to take its first block: O(n)",
        "        b = self.next[self.head]\n        if b == self.tail:\n            raise "
        'PoolError("no free block")',
        "        free = self.free_list()\n        b = free[0] if free else self.tail\n"
        '        if b == self.tail:\n            raise PoolError("no free block")',
    ),
]
MUTANTS += [
    # wrong attempts seen when a student went through the course
    M(
        "3.4b",
        "free_table_first_to_last",
        "free_table frees the blocks first to last, so the free list order differs from vLLM's",
        "    for b in reversed(table):",
        "    for b in table:",
    ),
    M(
        "3.7",
        "starts_rounded_one_by_one",
        "block_starts rounds each start up instead of the "
        "stride: "
        "1,200-byte blocks 1 and 2 overlap",
        "    stride = align_up(block_bytes, alignment)\n"
        "    return [i * stride for i in range(num_blocks)]",
        "    return [align_up(i * block_bytes, alignment) for i in range(num_blocks)]",
    ),
    M(
        "3.7",
        "empty_test_includes_zero",
        "the pop is atomic but takes old >= 0 as non-empty",
        "        if old > 0:",
        "        if old >= 0:",
    ),
    M(
        "3.2",
        "dtype_default_fp32",
        "dtype_bytes defaults to 4 instead of 2 (FP16)",
        "dtype_bytes: int = 2",
        "dtype_bytes: int = 4",
    ),
    M(
        "3.5",
        "waste_limit_exclusive",
        "a waste fraction exactly at max_waste is refused (< instead of <=)",
        "waste_fraction(lengths, bs) <= max_waste",
        "waste_fraction(lengths, bs) < max_waste",
    ),
    M(
        "3.3",
        "extra_block_when_full",
        "blocks_needed adds a block even when the tokens fill their blocks",
        "    return -(-num_tokens // block_size)",
        "    return num_tokens // block_size + 1",
    ),
    M(
        "3.6",
        "box_corner_on_the_centre",
        "each block's rectangle is placed with its corner, not its centre, on pool_xy",
        'ax.add_patch(Rectangle((x - CELL / 2, y - CELL / 2), CELL, CELL, gid=f"block-{b}"',
        'ax.add_patch(Rectangle((x, y), CELL, CELL, gid=f"block-{b}"',
    ),
]
MUTANTS += [
    # output dtype and contract; ordering and repeats of the inputs; in place vs a copy
    M(
        "3.3",
        "returns_float32",
        "paged_attention returns float32 although its docstring promises float64",
        '    return np.einsum("ht,thd->hd", weights, values[:, kv_head])  # [H, D]',
        '    return np.einsum("ht,thd->hd", weights, values[:, kv_head]).astype(np.float32)',
    ),
    M(
        "3.3",
        "scales_the_query_in_place",
        "paged_attention multiplies the caller's query by the scale in place",
        '    logits = np.einsum("hd,thd->ht", query.astype(np.float64), keys[:, kv_head]) * scale  '
        "# [H, T]",
        '    query *= scale\n    logits = np.einsum("hd,thd->ht", query.astype(np.float64), '
        "keys[:, kv_head])",
    ),
    M(
        "3.5",
        "candidates_assumed_sorted",
        "choose_block_size walks reversed(candidates), assuming they come sorted",
        "    for bs in sorted(candidates, reverse=True):",
        "    for bs in reversed(candidates):",
    ),
]
MUTANTS += [
    M(
        "3.1",
        "largest_hole_assumed_last",
        "external_fragmentation takes the last hole as the largest one",
        "    return 1.0 - max(size for _, size in holes) / free if free else 0.0",
        "    return 1.0 - holes[-1][1] / free if free else 0.0",
    ),
    M(
        "3.2",
        "strides_as_a_list",
        "strides returns a list, not the tuple its docstring promises",
        "    return tuple(reversed(out))",
        "    return out[::-1]",
    ),
    M(
        "3.2",
        "bytes_from_bits",
        "bytes_per_block goes through bits and a true division, so it returns a float",
        "    return block_size * num_layers * 2 * num_kv_heads * head_dim * dtype_bytes",
        "    return block_size * num_layers * 2 * num_kv_heads * head_dim * (dtype_bytes * 8) / 8",
    ),
    M(
        "3.7",
        "align_up_with_a_float_ceil",
        "align_up rounds with math.ceil of a float division and returns a float",
        "    return (nbytes + alignment - 1) & ~(alignment - 1)",
        "    return -(-nbytes / alignment // 1) * alignment",
    ),
]
MUTANTS += [
    M(
        "3.3",
        "scale_argument_ignored",
        "paged_attention always uses 1/sqrt(D) and ignores the scale it is given",
        "    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale",
        "    scale = 1.0 / np.sqrt(head_dim)",
    ),
    M(
        "3.5",
        "waste_with_a_float_ceil",
        "waste rounds up with np.ceil of a float division, so it returns a float",
        "    return sum(-(-n // block_size) * block_size - n for n in lengths)",
        "    return sum(float(-(-n // block_size) * block_size - n) for n in lengths)",
    ),
]

# ---- issue 31: attempts at realistic scale, each with the words its first message must hold ----
MUTANTS += [
    M(
        "3.4a",
        "num_free_recounted_with_count",
        "num_free is recounted with ref.count(0) after every change: allocate and free are O(n)",
        "        self.prev[n] = p\n        self.num_free -= 1\n",
        "        self.prev[n] = p\n        self.num_free = self.ref.count(0) - 1\n",
        says="list method such as count",
    ),
    M(
        "3.4a",
        "take_checks_membership_by_walking",
        "take() asks `b in self.free_list()`, walking the whole free list: O(n)",
        '        if self.ref[b]:\n            raise PoolError(f"block {b} is in use',
        '        if b not in self.free_list():\n            raise PoolError(f"block {b} is in use',
        says="must be O(1)",
    ),
]
RIGHT: list[Mutant] = [
    M(
        "3.4a",
        "push_in_another_order",
        "the four pointer writes of _push in another (still correct) order",
        "        n = self.next[self.head]\n        self.prev[b], self.next[b] = self.head, n\n"
        "        self.next[self.head] = b\n        self.prev[n] = b\n",
        "        n = self.next[self.head]\n        self.next[b] = n\n        self.prev[n] = b\n"
        "        self.prev[b] = self.head\n        self.next[self.head] = b\n",
    ),
    M(
        "3.4a",
        "allocate_through_take",
        "allocate() takes the first free block with take()",
        "        self._unlink(b)\n        self.ref[b] = 1\n        return b\n\n    def take",
        "        return self.take(b)\n\n    def take",
    ),
]
MUTANTS += [
    M(
        "3.2",
        "int32_strides",
        "strides are computed in an int32 NumPy array, so offsets past 2**31 wrap negative",
        "    return tuple(reversed(out))",
        "    import numpy as np\n\n    return tuple(np.array(list(reversed(out)) or [0], "
        "np.int32)[: len(out)])",
        says="2**31",
    ),
    M(
        "3.2",
        "kv_and_head_swapped",
        "flat_offset orders the pool [block, layer, head, kv, token, dim]: kv and head swapped",
        "    index = (block, layer, kv, head, token, dim)\n"
        "    return sum(i * s for i, s in zip(index, strides(shape)))",
        "    index = (block, layer, head, kv, token, dim)\n"
        "    shape = (shape[0], shape[1], shape[3], shape[2], shape[4], shape[5])\n"
        "    return sum(i * s for i, s in zip(index, strides(shape)))",
        says="kv and head axes in swapped order",
    ),
]
RIGHT += [
    M(
        "3.2",
        "offset_by_horner",
        "flat_offset by Horner's rule, no strides; strides with math.prod",
        "    index = (block, layer, kv, head, token, dim)\n"
        "    return sum(i * s for i, s in zip(index, strides(shape)))",
        "    out = 0\n    for size, i in zip(shape, (block, layer, kv, head, token, dim)):\n"
        "        out = out * size + i\n    return out",
    ),
]
MUTANTS += [
    M(
        "3.7",
        "starts_in_int32",
        "block_starts multiplies an int32 arange by the stride: block 256 of 8 MiB wraps negative",
        "    return [i * stride for i in range(num_blocks)]",
        "    return [int(s) for s in np.arange(num_blocks, dtype=np.int32) * np.int32(stride)]",
        says="2**31",
    ),
    M(
        "3.7",
        "align_up_with_a_32_bit_mask",
        "align_up masks with 0xFFFFFFFF ^ (alignment - 1), dropping bits past 2**32",
        "    return (nbytes + alignment - 1) & ~(alignment - 1)",
        "    return (nbytes + alignment - 1) & (0xFFFFFFFF ^ (alignment - 1))",
        says="a mask of 32 bits",
    ),
]
RIGHT += [
    M(
        "3.7",
        "starts_with_int64_arange",
        "block starts from an int64 arange, align_up with -(-n // a) * a",
        "    return [i * stride for i in range(num_blocks)]",
        "    return [int(s) for s in np.arange(num_blocks, dtype=np.int64) * stride]",
    ),
]
MUTANTS += [
    M(
        "3.3",
        "scale_or_default",
        "`scale or 1/sqrt(D)` ignores an explicit scale=0.0",
        "    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale",
        "    scale = scale or 1.0 / np.sqrt(head_dim)",
        says="explicit 0.0 was taken as not given",
    ),
    M(
        "3.3",
        "result_in_a_module_buffer",
        "the result is written into one module-level buffer and a view of it returned",
        '    return np.einsum("ht,thd->hd", weights, values[:, kv_head])  # [H, D]',
        "    out = _BUFFER.reshape(-1)[: num_heads * head_dim].reshape(num_heads, head_dim)\n"
        '    out[...] = np.einsum("ht,thd->hd", weights, values[:, kv_head])\n'
        "    return out\n\n\n_BUFFER = np.zeros(1 << 16)",
        says="view of one buffer",
    ),
    M(
        "3.3",
        "query_scaled_in_place_first",
        "the query is scaled in place (query *= scale) before the logits",
        '    logits = np.einsum("hd,thd->ht", query.astype(np.float64), keys[:, kv_head]) * scale  '
        "# [H, T]",
        "    query *= scale\n"
        '    logits = np.einsum("hd,thd->ht", query.astype(np.float64), keys[:, kv_head])',
        says="changed its argument query in place",
    ),
]
RIGHT += [
    M(
        "3.3",
        "loop_over_tokens",
        "attention gathered token by token in a Python loop, scale tested with `is None`",
        "    keys = kv_cache[blocks, 0, :, offsets, :].astype(np.float64)  # [T, H_kv, D]\n"
        "    values = kv_cache[blocks, 1, :, offsets, :].astype(np.float64)  # [T, H_kv, D]\n",
        "    keys = np.stack([kv_cache[b, 0, :, o, :] for b, o in zip(blocks, offsets)]"
        ").astype(np.float64).reshape(context_len, num_kv_heads, head_dim)\n"
        "    values = np.stack([kv_cache[b, 1, :, o, :] for b, o in zip(blocks, offsets)]"
        ").astype(np.float64).reshape(context_len, num_kv_heads, head_dim)\n",
    ),
]
MUTANTS += [
    M(
        "3.5",
        "waste_compared_as_a_rounded_percent",
        "the waste fraction is compared as a rounded whole percent: 5.3% passes a 5% limit",
        "waste_fraction(lengths, bs) <= max_waste",
        "round(100 * waste_fraction(lengths, bs)) <= round(100 * max_waste)",
        says="rounded",
    ),
    M(
        "3.5",
        "waste_fraction_in_float32",
        "waste_fraction divides in float32: wrong within about 1e-9 of the limit",
        "    return waste(lengths, block_size) / allocated if allocated else 0.0",
        "    import numpy as np\n\n    return float(np.float32(waste(lengths, block_size)) / "
        "np.float32(allocated)) if allocated else 0.0",
        says="float32",
    ),
    M(
        "3.5",
        "limit_compared_in_float32",
        "the comparison is made in float32, so one slot past the limit in 2**30 passes",
        "waste_fraction(lengths, bs) <= max_waste",
        "__import__('numpy').float32(waste_fraction(lengths, bs)) <= "
        "__import__('numpy').float32(max_waste)",
        says="one slot past",
    ),
]
RIGHT += [
    M(
        "3.5",
        "compare_slots_not_fractions",
        "the limit compared in slots (waste <= max_waste * allocated) instead of as a fraction",
        "waste_fraction(lengths, bs) <= max_waste",
        "waste(lengths, bs) <= max_waste * (sum(lengths) + waste(lengths, bs))",
    ),
]
MUTANTS += [
    M(
        "3.6",
        "rows_from_a_set",
        "table rows are numbered in the order of a set of sequence ids (hash order)",
        "    for row, seq in enumerate(snapshot.sequences):",
        "    by_id = {s.seq_id: s for s in snapshot.sequences}\n"
        "    for row, seq in enumerate(by_id[k] for k in {s.seq_id for s in snapshot.sequences}):",
        says="enumerate(snapshot.sequences)",
    ),
    M(
        "3.6",
        "blocks_in_one_row",
        "blocks are placed at (b, 0), the check's one-row pool of 8 hard-coded",
        "    for b in range(n):\n        x, y = pool_xy(b)",
        "    for b in range(n):\n        x, y = float(b), 0.0",
        says="starts a new row every PER_ROW",
    ),
]
RIGHT += [
    M(
        "3.6",
        "rows_by_index",
        "rows numbered by index into snapshot.sequences, free list joined by a loop",
        "    for row, seq in enumerate(snapshot.sequences):",
        "    for row in range(len(snapshot.sequences)):\n        seq = snapshot.sequences[row]",
    ),
]
MUTANTS += [
    M(
        "3.4b",
        "copies_rebound",
        "slot_for_append rebinds copies (copies = copies + [...]): the caller never gets the pair",
        "        copies.append((src, dst))\n",
        "        copies = copies + [(src, dst)]\n",
        says="the (src, dst) pair was lost",
    ),
    M(
        "3.4b",
        "table_rebound",
        "slot_for_append rebinds table (table = table + [...]): the caller's table never grows",
        "        table.append(pool.allocate())",
        "        table = table + [pool.allocate()]",
        says="only rebinds",
    ),
    M(
        "3.4b",
        "cow_leaks_the_source",
        "copy-on-write allocates the private block but never frees the shared one",
        "        pool.free(src)\n        table[-1] = dst",
        "        table[-1] = dst",
        says="the writer must let go of it",
    ),
    M(
        "3.4b",
        "free_table_skips_the_first_block",
        "free_table frees every block but the first",
        "    for b in reversed(table):",
        "    for b in reversed(table[1:]):",
        says="free_table must pool.free every block",
    ),
]
RIGHT += [
    M(
        "3.4b",
        "fork_by_comprehension",
        "fork increfs in a comprehension; free_table pops the table until empty",
        "    for b in reversed(table):\n        pool.free(b)\n    table.clear()",
        "    while table:\n        pool.free(table.pop())",
    ),
]
_POP = (
    "        old = cuda.atomic.sub(top, 0, 1)\n        if old > 0:\n"
    "            out[i] = free_stack[old - 1]\n        else:\n            out[i] = -1"
)
MUTANTS += [
    M(
        "3.7",
        "top_reread_after_the_atomic",
        "the pop does the atomic, then reads top again for its index",
        _POP,
        "        cuda.atomic.sub(top, 0, 1)\n        old = top[0] + 1\n        if old > 0:\n"
        "            out[i] = free_stack[old - 1]\n        else:\n            out[i] = -1",
        says="a re-read of top after the atomic",
    ),
    M(
        "3.7",
        "check_then_act",
        "the pop tests top with a plain read, then does the atomic",
        _POP,
        "        if top[0] > 0:\n            old = cuda.atomic.sub(top, 0, 1)\n"
        "            out[i] = free_stack[old - 1]\n        else:\n            out[i] = -1",
        says="check-then-act",
    ),
    M(
        "3.7",
        "cas_without_retry",
        "the pop reads top, compare-and-swaps it once, and takes the block even if the CAS failed",
        _POP,
        "        old = top[0]\n        cuda.atomic.cas(top, 0, old, old - 1)\n        if old > 0:\n"
        "            out[i] = free_stack[old - 1]\n        else:\n            out[i] = -1",
        says="a CAS without retry",
    ),
]
RIGHT += [
    M(
        "3.7",
        "pop_with_a_cas_loop",
        "the pop retries a compare-and-swap until it wins",
        _POP,
        "        old = top[0]\n        while old > 0:\n"
        "            seen = cuda.atomic.cas(top, 0, old, old - 1)\n            if seen == old:\n"
        "                break\n            old = seen\n        if old > 0:\n"
        "            out[i] = free_stack[old - 1]\n        else:\n            out[i] = -1",
    ),
    M(
        "3.7",
        "one_atomic_per_block_through_shared_memory",
        "thread 0 takes every thread's block with one atomic, shared through shared memory",
        "    i = cuda.grid(1)\n    if i < out.shape[0]:\n" + _POP,
        "    i = cuda.grid(1)\n    base = cuda.shared.array(1, np.int32)\n"
        "    if cuda.threadIdx.x == 0:\n"
        "        want = min(cuda.blockDim.x, out.shape[0] - cuda.blockIdx.x * cuda.blockDim.x)\n"
        "        base[0] = cuda.atomic.sub(top, 0, want)\n    cuda.syncthreads()\n"
        "    if i < out.shape[0]:\n        old = base[0] - cuda.threadIdx.x\n"
        "        if old > 0:\n            out[i] = free_stack[old - 1]\n"
        "        else:\n            out[i] = -1",
    ),
]
# ---- the kernel puzzles (3.k1 ... 3.k6) ----
MUTANTS += [
    M(
        "3.k1",
        "padding_written",
        "a padded token (slot -1) is written to the cache's last slot",
        "        if slot >= 0:\n            k_cache[slot, d] = key[t, d]",
        "        k_cache[slot, d] = key[t, d]",
        says="should have",
    ),
    M(
        "3.k1",
        "token_from_the_wrong_stride",
        "t = i // T instead of i // D",
        "    t, d = i // D, i % D",
        "    t, d = i // key.shape[0], i % D",
        says="which thread",
    ),
    M(
        "3.k2",
        "offset_from_head_dim",
        "the offset in the block is p % D instead of p % B",
        "        out[p, d] = k_cache[block, p % B, d]",
        "        out[p, d] = k_cache[block, p % D, d]",
        says="the spec says | your code raised IndexError",
    ),
    M(
        "3.k2",
        "table_skipped",
        "the logical block is used as the physical one",
        "        block = block_table[p // B]",
        "        block = p // B",
        says="the spec says",
    ),
    M(
        "3.k3",
        "no_max_subtracted",
        "exp of raw logits: overflows on large ones",
        "            total += math.exp(s * scale - top)",
        "            total += math.exp(s * scale)",
        says="the spec says",
    ),
    M(
        "3.k3",
        "scale_forgotten",
        "the logits are never scaled by 1/sqrt(D)",
        "        scale = 1.0 / math.sqrt(D)",
        "        scale = 1.0",
        says="the spec says",
    ),
    M(
        "3.k4",
        "plain_average",
        "the partials are averaged, ignoring their lse",
        "        out[h, d] = (w1 * o1[h, d] + w2 * o2[h, d]) / (w1 + w2)",
        "        out[h, d] = (o1[h, d] + o2[h, d]) / 2",
        says="the spec says",
    ),
    M(
        "3.k4",
        "lse_out_is_the_max",
        "lse_out is the maximum, not m + log(w1 + w2)",
        "            lse_out[h] = m + math.log(w1 + w2)",
        "            lse_out[h] = m",
        says="lse_out",
    ),
    M(
        "3.k5",
        "copies_the_wrong_way",
        "the source is overwritten by the destination",
        "        cache[pairs[p, 1], b, d] = cache[pairs[p, 0], b, d]",
        "        cache[pairs[p, 0], b, d] = cache[pairs[p, 1], b, d]",
        says="should have",
    ),
    M(
        "3.k5",
        "first_slot_only",
        "only slot 0 of each block is copied",
        "    p, b, d = i // (B * D), (i // D) % B, i % D",
        "    p, b, d = i // D, 0, i % D",
        says="the spec says",
    ),
    M(
        "3.k6",
        "window_off_by_one",
        "a block ending one token before the window is kept",
        "        if (j + 1) * B <= n - w:",
        "        if (j + 1) * B < n - w:",
        says="the spec says",
    ),
    M(
        "3.k6",
        "first_token_compared",
        "a block is dropped once its first token leaves the window",
        "        if (j + 1) * B <= n - w:",
        "        if j * B < n - w:",
        says="the spec says | different from the spec",
    ),
]
RIGHT += [
    M(
        "3.k1",
        "write_kv_with_grid",
        "the thread index from cuda.grid(1)",
        "    i = cuda.threadIdx.x\n    D = key.shape[1]",
        "    i = cuda.grid(1)\n    D = key.shape[1]",
    ),
    M(
        "3.k6",
        "window_start_compared",
        "the window's start compared with the block's last token",
        "        if (j + 1) * B <= n - w:",
        "        if n - w > (j + 1) * B - 1:",
    ),
    M(
        "3.k4",
        "max_by_an_if",
        "the maximum taken with an if, the weights named differently",
        "        m = max(a, b)",
        "        m = a\n        if b > m:\n            m = b",
    ),
]
MUTANTS += [  # the classic puzzle bug: no guard, so the launch's extra threads run too
    M(
        "3.k1",
        "no_guard",
        "extra threads are not stopped: they read past key",
        "    if t < key.shape[0]:\n        slot",
        "    if True:\n        slot",
        says="IndexError",
    ),
    M(
        "3.k2",
        "no_guard",
        "extra threads are not stopped: they write past out",
        "    if p < out.shape[0]:",
        "    if True:",
        says="IndexError",
    ),
    M(
        "3.k3",
        "no_guard",
        "extra threads are not stopped: they read past q",
        "    if h < q.shape[0]:",
        "    if True:",
        says="IndexError",
    ),
    M(
        "3.k4",
        "no_guard",
        "extra threads are not stopped: they read past the partials",
        "    if h < o1.shape[0]:",
        "    if True:",
        says="IndexError",
    ),
    M(
        "3.k5",
        "no_guard",
        "extra threads are not stopped: they read past pairs",
        "    if p < pairs.shape[0]:",
        "    if True:",
        says="IndexError",
    ),
    M(
        "3.k6",
        "no_guard",
        "extra threads are not stopped: they write past dropped",
        "    if j < dropped.shape[0]:",
        "    if True:",
        says="IndexError",
    ),
]
MUTANTS += [
    M(
        "3.1",
        "merge_right_only",
        "free merges the range with the hole after it, never before",
        "        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == start:",
        "        if False:",
        says="did not merge with the hole before it",
    ),
]
RIGHT += [
    M(
        "3.1",
        "free_by_sorting",
        "free appends the range, sorts the holes and merges in one pass",
        "        i = 0\n        while i < len(self.holes) and self.holes[i][0] < start:\n"
        "            i += 1\n        self.holes.insert(i, (start, size))\n",
        "        merged = []\n        for s, n in sorted(self.holes + [(start, size)]):\n"
        "            if merged and merged[-1][0] + merged[-1][1] == s:\n"
        "                merged[-1] = (merged[-1][0], merged[-1][1] + n)\n"
        "            else:\n                merged.append((s, n))\n"
        "        self.holes[:] = merged\n        return\n",
    ),
]
