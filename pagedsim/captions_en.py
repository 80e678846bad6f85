"""The English caption table: every template a step story (`story.py`) is told with.

Keys are the stories' own: `key.one` is the singular for a count of 1, `key.alone` a
fragment with nothing before it, `key.sep` joins a list (default `sep`). The Chinese table
(`pagedsim/text/captions.py`) has the same keys. Change the wording on purpose only.
"""

EN = {
    "sep": ", ",
    "blocks": "blocks {list}",
    "blocks.one": "block {list}",
    "pool": "a pool of {num_gpu_blocks} blocks x {block_size} tokens, all free",
    "quiet": "nothing changed",
    "refused": (
        "seq {seq_id} {what} needs {needed} free block(s) but only {available} are free: "
        "OutOfBlocks, nothing changed"
    ),
    "refused.one": (
        "seq {seq_id} {what} needs {needed} free block(s) but only {available} is "
        "free: OutOfBlocks, nothing changed"
    ),
    "arrival": "seq {seq_id} arrives with {num_tokens} tokens",
    "arrival.shared": ", shares cached {blocks}",
    "arrival.taken": " and takes {blocks}",
    "fork": "seq {child} forks from seq {parent} and shares {blocks} ({counts})",
    "fork.empty": "seq {child} forks from empty seq {parent}",
    "fork.count": "count now {count}",
    "fork.counts": "counts now {items}",
    "fork.counts.item": "{block}: {count}",
    "finish": "seq {seq_id} finishes",
    "finish.back": ": {blocks} return to the free list",
    "finish.back.one": ": {blocks} returns to the free list",
    "finish.kept": "; {items}",
    "finish.kept.alone": ": {items}",
    "finish.kept.item": "block {block} stays (count {count})",
    "decode": "decode step: {num_seqs} sequences append one token each",
    "decode.copies": "; copy-on-write {items}",
    "decode.copies.item": "{src} -> {dst}",
    "decode.fresh": "; full last blocks take {blocks}",
    "append": "seq {seq_id} appends {where}",
    "append.where": "tokens {first}..{last}",
    "append.where.one": "token {first} (slot {slot})",
    "append.copy": (
        ": block {src} is shared (count {count}), so copy-on-write gives seq {seq_id} block {dst}"
    ),
    "append.fresh": "; the last block is full, so it takes {blocks}",
    "append.fresh.alone": ": the last block is full, so it takes {blocks}",
    "append.dropped": "; {blocks} fell out of the window and are released",
    "append.dropped.one": "; {blocks} fell out of the window and is released",
    "unnamed": "{items}",
    "unnamed.sep": "; ",
}
