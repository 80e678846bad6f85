"""What a KV event stream's page shows at each step, read back from the page alone.

`page_json(html)` takes the page's embedded data out of the HTML as a browser would
(JSON.parse of the script element's text). `tiles(data)` replays its steps' differences
(k / ku / h, as viewer.js does) into the short hash on each cached tile, step by step;
`cached(data, n)` is the page's hover data at event n: full hash -> (tokens, parent).
Both are independent of `pagedsim.view.stream`, so a test compares the page with a
manager's state and not the page's code with itself.
"""

from __future__ import annotations

import json
import re


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
        r["h"]: (tuple(r["tok"]), r["p"])
        for r in data["stream"]["recs"]
        if r["from"] <= n and (r["to"] is None or r["to"] > n)
    }


def on_tiles(data: dict, n: int) -> dict[int, str]:
    """The same blocks by tile: slot -> short hash, from the hover data."""
    return {
        r["slot"]: r["s"]
        for r in data["stream"]["recs"]
        if r["from"] <= n and (r["to"] is None or r["to"] > n)
    }
