"""What a KV event stream's page shows at each step, read back from the page alone.

`page_json(html)` takes the page's embedded data out of the HTML as a browser would
(JSON.parse of the script element's text). `tiles(data)` replays its steps' differences
(k / ku / h, as viewer.js does) into the short hash on each cached tile, step by step;
`cached(data, n)` is the page's hover data at event n: full hash -> (tokens, parent).
Both are independent of `pagedsim.view.stream`, so a test compares the page with a
manager's state and not the page's code with itself.

`check_follows(data, ops)` is that comparison: `ops` are the operations of a workload
that published events, each (vLLM's events, pagedsim's events, pagedsim's cached blocks
after it); after every event the page must hold, through a consistent vLLM -> pagedsim
hash map, the blocks pagedsim's events say, and after every operation those of
pagedsim's own pool.
"""

from __future__ import annotations

import json
import re

from pagedsim import kv_events as ke


class Model:
    """The cache a stream describes, kept the plainest way: hash -> token ids."""

    def __init__(self) -> None:
        self.blocks: dict[object, tuple[int, ...]] = {}

    def apply(self, e) -> None:
        if isinstance(e, ke.AllBlocksCleared):
            self.blocks.clear()
        elif isinstance(e, ke.BlockRemoved):
            for h in e.block_hashes:
                self.blocks.pop(h, None)
        else:
            bs = e.block_size
            for i, h in enumerate(e.block_hashes):
                self.blocks.setdefault(h, tuple(e.token_ids[i * bs : (i + 1) * bs]))


def held(manager) -> dict[int, tuple[int, ...]]:
    """A PrefixCachingManager's cached blocks: hash -> token ids."""
    pool = manager.pool
    return {
        pool.hash_of(b): tuple(pool.tokens_of(b))
        for b in range(manager.num_gpu_blocks)
        if pool.is_cached(b)
    }


def check_follows(data: dict, ops, link) -> int:
    """Compare (module doc); returns the number of events checked."""
    model, n, states = Model(), 0, tiles(data)
    for theirs, ours, after in ops:
        assert [type(e).__name__ for e in theirs] == [type(e).__name__ for e in ours]
        link.link(theirs, ours)
        for e in ours:
            n += 1
            model.apply(e)
            page = {link.to_ours[_hash(h)]: tok for h, (tok, _) in cached(data, n).items()}
            assert page == model.blocks, f"event {n}"
            assert states[n] == on_tiles(data, n), f"event {n}: tiles and hover data"
        assert model.blocks == after, f"after event {n}: pagedsim's own pool"
    assert [s["n"] for s in data["steps"]] == list(range(n + 1)), "one step per event"
    return n


def _hash(text: str):
    """A hash as the page writes it (an int's decimal, or hex for bytes) as the link has it."""
    return int(text) if text.isdigit() else bytes.fromhex(text)


def page_json(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)
    assert m is not None, "no embedded trace data"
    return json.loads(m.group(1))


def tiles(data: dict) -> list[dict[int, str]]:
    """Per step: slot -> short hash of every cached tile."""
    cached: set[int] = set()
    hashes: dict[int, str] = {}
    out = []
    for step in data["steps"]:
        cached |= set(step.get("k", ()))
        cached -= set(step.get("ku", ()))
        h = step.get("h", [])
        for i in range(0, len(h), 2):
            hashes[h[i]] = h[i + 1]
        out.append({s: hashes[s] for s in sorted(cached)})
    return out


def cached(data: dict, n: int) -> dict[str, tuple[tuple[int, ...], str | None]]:
    """The blocks cached after event n: full hash -> (token ids, parent's full hash)."""
    return {
        r["h"]: (tuple(r["tok"]), r.get("p"))
        for r in data["stream"]["recs"]
        if r["from"] <= n and (r.get("to") is None or r["to"] > n)
    }


def on_tiles(data: dict, n: int) -> dict[int, str]:
    """The same blocks by tile: slot -> short hash, from the hover data."""
    return {
        r["slot"]: r["s"]
        for r in data["stream"]["recs"]
        if r["from"] <= n and (r.get("to") is None or r["to"] > n)
    }
