"""A trace in the browser: one self-contained HTML page that steps through the real state.

`to_html(trace_or_snapshots, PageOptions(...))` returns the page as a string: the trace as JSON
(per-step differences, `view/diffs.py`) plus the package's `viewer.js` and `viewer.css`,
inlined. The page makes no request: no CDN, no web fonts, no images, no network, and
there is no build step. Open it from disk, project it, mail it. `View` shows the same
page in a notebook (an iframe with the page in `srcdoc`, so it works offline too).

The page draws what the figures draw (`draw/render.py`), as a pure function of one
step's state: the free list head first; every physical block in the owners' colours
(the figures' palette, `draw/style.py`), with its ref-count badge, fill bar, prefix-cache
hash and the text it holds (`generate`); each sequence's block table, logical ->
physical (both KV cache groups, side by side, for a hybrid trace); the step's caption
and its "why" line; what the step changed, outlined; copy-on-write arrows (src -> dst);
OutOfBlocks and preemption marked; which vLLM version (v0 or v1) the mechanism follows.

Every step outlines what it changed (each block whose ref count, fill, cache flag, text or
hash differs, the free-list entries and the table cells it wrote), names it in a "changed"
strip (allocated, hit, shared, copied, released (naming who let go), freed, evicted,
hashed, filled, swapped out / in; each block a link), and scrolls the panes so the change
is in view (in a wide window the tables and the pool scroll on their own; tables too
long for their pane fold the tables and cells the step left alone, and a big pool the
rows of tiles between its changes). A swap page has
a host pane (`play` under swap preemption, `generate` when the v0 engine swaps a request
out); a `generate` page has plain captions (`narrate.py`), its engine notation on hover,
and a request timeline. Every trace
page has the kernel's view (`kernel_view.py`): how paged attention reads a chosen sequence's
blocks at the step, with `cuda_kernels`' split-K plan, beside contiguous vs paged slots.
A big pool (over 256 blocks) shows a tile's ref-count badge only above 1, lays its rows of
32 tiles out in lines of 32, 16, 8 or 4, whichever fits the pane (no tile off to the side),
and renders only the table rows near the window (the DOM still holds every row and cell).

Controls: Prev/Next buttons and ArrowLeft/ArrowRight, Home/End, a scrubber, Play/Pause
(Space) with a speed menu, P (or the button) for presentation mode, F for full screen.
Presentation mode sizes everything in 1% of the largest 16:9 box the window holds (at
1920x1080 the caption is 34 px and block labels >= 20 px) and fits a small pool's tiles
to the pool pane and the tables' text to their column (1.5 down to 0.8 units, so a step's
changed cells fit in sight together); the controls hide until the mouse moves, a legend
stays, the caption is at most two lines (a long block list counted, the full caption on
hover). Hover or
click a block to see its id, ref count, owners, fill, hash, text and the step that last
changed it. The step index lives in the URL hash (`page.html#step=4`, `#step=4&present`
in presentation mode), so a link opens at that step, in that mode.

DOM contract (tests and other tools read the state back from these; kept stable):

    #step        text "step K / N": K the shown snapshot's step number, N the last one's
    #caption     the step's caption (text only)
    #why         the step's "why" line (may be empty)
    #blocks      every physical block as an element with data-block="<id>" and
                 data-ref="<ref count>" (0 when free); also data-fill="<tokens>";
                 class "touched" on each block the step changed (so a cell in #tables)
    #free-list   the free blocks, head first, each an element with data-block="<id>"
                 (hidden elements without data-block after them are kept for reuse)
    #tables      one element per live sequence, data-seq="<name>" (its id, or the name
                 `PageOptions.names` gives it: `generate`'s "r0.0"), in admission order (a
                 hybrid trace: group by group, "A:full" ... then "A:window" ...); its
                 children with data-block are its physical blocks in logical order
                 (data-block="-1": a logical block a sliding window dropped); a step
                 whose changed cells do not fit the pane folds the tables between them
                 that show none, then the other cells (class "folded", hidden; a .fold
                 mark before each run: "\u2026N tables", "\u2026N"); a big pool's step
                 folds its rows of tiles between the changed ones (#blocks .row.folded,
                 a .fold mark "\u2026 32\u201363"), and where they still do not fit
                 lays each row out on one line (#blocks.squeezed); a small pool folds
                 the runs of tiles between (#blocks .block.folded, a .fold mark
                 "\u2026 48\u201353"), then shrinks its tiles (#blocks.squeezed)
    #version     the vLLM version label
    #changes     the step's changes: [data-kind] groups of [data-goto="<block>"] links
    #headline    presentation mode's caption (two lines at most; its title the full one)
    #legend      what each look means; #host the host's blocks ([data-host-seq]) under swap
    #timeline    `generate`'s request timeline, a row per request ([data-request]), one done
                 within a step (in no table) too
    #kernel      the kernel's view of the chosen sequence (data-seq; a click on a table's
                 .seq chooses): .kcell per logical block (data-logical, data-phys, data-order
                 (read order, "" when not read), data-partition, data-tokens "lo-hi",
                 data-read "lo-hi" of what is read ("" none), data-bytes), .kplan
                 [data-partition] (data-tokens, data-blocks), on a hybrid page .kgroups
                 [data-group] (data-read, data-blocks: what each group of the sequence
                 reads), and [data-layout="contiguous"] (data-sequences/reserved/used/
                 wasted; a [data-kseq] bar per sequence) beside [data-layout="paged"]
                 (data-blocks/slots/stored/unfilled); none on a page whose trace holds
                 no sequence, hidden in presentation mode until K
    body         data-step-index="<i>" (0-based position in the trace) and
                 data-steps="<count>"; class "projector" in presentation mode
    window.pagedsimViewer   {go(i), index(), count()} for tools that drive the page

Any text is safe: every string from a trace (captions, sequence ids, block text, hashes,
title) travels as JSON with "<", ">", "&", U+2028/U+2029 and lone surrogates written as
\\uXXXX escapes, so nothing in it can end the data's <script> element, and the page puts it
on screen as text only (never as HTML), with bidi overrides and other invisible controls
shown as "<U+202E>" (so are other texts from a vLLM stream); a title or a version label,
however long, keeps one line on screen. The data holds no NaN or Infinity (a page is refused
rather than left blank), and a host or timeline that names a sequence the trace lacks, a step
outside it, or more host blocks than the pool has is refused. A saved trace is read only up to
`trace_json.MAX_BYTES` (256 MiB; larger is refused unread, as are NaN and nesting json's
parser cannot take), its whole numbers at most 2**53 - 1. A page's size is the trace's
differences plus the viewer (about 75 kB): each text is stored once (the tab's <title> holds
at most 200 characters of the title), and escaping at most multiplies a text's length by 6,
so a page is at most 6 times its saved trace plus the viewer. A stream's page is at most 24
times its stream plus the viewer (`stream.py`).

Reference: the PagedAttention paper (Kwon et al., SOSP 2023), Fig. 6-8, and vLLM v1's
`vllm/v1/core/block_pool.py` (the free queue) for what is drawn.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from ..palette import ACCENT, ALERT, FREE, css_root
from ..palette import SEQ_COLOURS as PALETTE
from ..text.captions import caption as _caption
from ..text.lang import LANGS
from ..trace import Snapshot, Trace
from .diffs import encode

UI_ZH = {
    "step": "第",
    "of": "/",
    "Prev": "上一步",
    "Next": "下一步",
    "Play": "播放",
    "Pause": "暂停",
    "speed": "速度",
    "Projector": "演示",
    "free list, head first": "空闲链表，表头在前",
    "block tables (logical \u2192 physical)": "块表（逻辑 \u2192 物理）",
    "physical blocks": "物理块",
    "why": "原因",
    "empty: the next allocate() fails": "空：下一次 allocate() 会失败",
    "(no sequences)": "（没有序列）",
    "OutOfBlocks": "OutOfBlocks（块耗尽）",
    "preempted": "抢占",
    "KV cache group": "KV cache 组",
    "block": "块",
    "ref count": "引用计数",
    "owners": "所有者",
    "fill": "填充",
    "hash": "哈希",
    "text": "文本",
    "last changed at step": "最近一次改动在第几步",
    "cached": "已缓存",
    "free": "空闲",
    "tokens": "个 token",
    "dropped": "已丢弃",
    "copy-on-write": "写时复制",
    "changed this step": "本步改动",
    "allocated": "分配",
    "hit": "命中缓存",
    "copied": "复制",
    "shared": "共享",
    "swapped out": "换出",
    "swapped in": "换入",
    "released": "释放一个引用",
    "released by {who}": "由 {who} 释放一个引用",
    "freed": "释放",
    "evicted": "驱逐",
    "hashed": "已哈希",
    "filled": "写入",
    "touched": "涉及",
    "requests": "请求",
    "host memory (swapped out)": "主机内存（已换出）",
    "running": "运行中",
    "folded blocks, unchanged this step": "折叠的块（本步未改动）",
    "folded tables, unchanged this step": "折叠的块表（本步未改动）",
    "tables": "张块表",
    "engine": "引擎记法",
    "keys": "按键：\u2190 \u2192 Home End，空格 播放，P 演示，F 全屏",
    "a sequence's colour": "序列的颜色",
    "shared (ref count > 1)": "共享（引用计数 > 1）",
    "cached (free, prefix cache)": "已缓存（空闲，前缀缓存）",
    "free-list head": "空闲链表表头",
    "cached by vLLM's prefix cache (chip: its hash)": "已被 vLLM 前缀缓存（标签：其哈希）",
}
UI_KEYS = tuple(UI_ZH)


def _ui(lang: str) -> dict:
    if lang == "zh":
        return dict(UI_ZH)
    out = {k: k for k in UI_KEYS}
    out.update(
        {
            "step": "step",
            "of": "/",
            "keys": "keys: \u2190 \u2192 Home End, Space play, P present, F full screen",
            "Projector": "Present",
        }
    )
    return out


def _snapshots(trace_or_snapshots) -> list:
    if isinstance(trace_or_snapshots, Trace):
        snaps = list(trace_or_snapshots.snapshots)
    elif isinstance(trace_or_snapshots, dict):  # trace_json.to_dict(trace), e.g. `tour --json`
        from ..io.trace_json import snapshots_from_dict

        snaps = snapshots_from_dict(trace_or_snapshots)
    else:
        snaps = list(trace_or_snapshots)
    if not snaps:
        raise ValueError(
            "nothing to show: the trace has no snapshots (was it recorded with "
            "keep_snapshots=True?)"
        )
    if not all(isinstance(s, Snapshot) for s in snaps):
        raise TypeError(
            "to_html takes a Trace, a list of Snapshots or a trace_json.to_dict(trace) dict"
        )
    if len({(s.num_gpu_blocks, s.block_size) for s in snaps}) != 1:
        raise ValueError("the snapshots disagree on the pool's size")
    return snaps


def _groups(names) -> list | None:
    """The KV cache groups of a hybrid trace ("A:full", "A:window"), else None."""
    suffixes = {str(n).rsplit(":", 1)[1] for n in names if ":" in str(n)}
    if names and all(":" in str(n) for n in names) and suffixes <= {"full", "window"}:
        return ["full", "window"]
    return None


@dataclass(frozen=True)
class PageOptions:
    """What a page shows beside its snapshots; every field may be left out.

    lang: the page's language; title / version: its title and the vLLM version label;
    whys: the "why" line of each step (a list, by position); marks: {position: ("oob" |
    "pre" | "out" | "in", ...)}, added to the OutOfBlocks marks the events already show;
    captions: each step's caption (default: the snapshot's own, in `lang`); labels /
    hashes: each step's text and prefix-cache hash per block (default: the snapshots'
    `block_labels` / `block_hashes`, if they carry them); story: {"details": each step's
    detail, shown on hovering its caption (e.g. `generate`'s engine notation), "timeline":
    [[seq, first scheduled, [preempted at, ...], finished or -1], ...] by step position
    (`narrate.py`), "host": each step's swapped-out sequences, [[seq, blocks], ...],
    "kernel": `kernel_view.kernel_story(...)` (default: computed; False: no kernel's view),
    "shape": the model's `kernel_view.KernelShape` for it (default: SMALL_DECODE), "window":
    the sliding window's tokens, which its layers read (`play --sliding-window`)}; names:
    a function from a snapshot's sequence id to the name the page calls it (default `str`),
    so that the tables, hover boxes, host pane and timeline say what the captions say
    (`generate`: `lockstep.seq_name`)."""

    lang: str = "en"
    title: str = "pagedsim"
    version: str = ""
    whys: Any = None
    marks: Any = None
    captions: Any = None
    labels: Any = None
    hashes: Any = None
    story: Any = None
    names: Any = None


def page_data(trace_or_snapshots, options: PageOptions | None = None) -> dict:
    """Everything the page shows, as JSON-ready data (see `diffs.py` for a step's shape)."""
    o = options or PageOptions()
    lang, whys, marks, captions, story = o.lang, o.whys, o.marks, o.captions, o.story
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    snaps = _snapshots(trace_or_snapshots)
    if captions is None:
        captions = [_caption(s, lang) for s in snaps]
    if len(captions) != len(snaps) or (whys is not None and len(whys) > len(snaps)):
        raise ValueError(
            f"{len(snaps)} snapshots but {len(captions)} captions and {len(whys or ())} why lines"
        )
    marks = {i: list(v) for i, v in (marks or {}).items()}
    for i, s in enumerate(snaps):
        if any(e.kind == "allocation_failed" for e in s.events) and "oob" not in marks.get(i, ()):
            marks.setdefault(i, []).append("oob")
    data = encode(snaps, captions, list(whys or ()), marks, o.labels, o.hashes, o.names or str)
    if len(set(data["seqs"])) != len(data["seqs"]):
        raise ValueError(f"two sequences share a name: {data['seqs']}")
    story = story or {}
    for step, detail in zip(data["steps"], story.get("details") or (), strict=False):
        if detail:
            step["dt"] = str(detail)
    if any(story.get("host") or ()):
        data["host"] = _host(story["host"], data)
    if story.get("timeline"):
        data["timeline"] = _timeline(story["timeline"], data, len(snaps))
    kernel = _kernel(story, snaps, o.names or str, lang, _groups(data["seqs"]) is not None)
    if kernel:  # kernel_view.kernel_story: plain numbers, made JSON-safe here
        from .kernel_view import words

        data["kernel"] = {
            "part": [int(x) for x in kernel["part"]],
            "slots": int(kernel["slots"]),
            "gpu": str(kernel["gpu"]),
            "ctas": int(kernel["ctas"]),
            "path": str(kernel["path"]),
            "shape": [int(x) for x in kernel["shape"]],
            "assumed": bool(kernel["assumed"]),
            "bytesPerToken": int(kernel["bytes_per_token"]),
            # by sequence index (a name such as "__proto__" is never an object's key)
            "maxTokens": [int(kernel["max_tokens"].get(q, 0)) for q in data["seqs"]],
            "words": words(lang),  # the panel's templates in the page's language
        }
        if "part_window" in kernel:  # a sliding window's launch: its own plan per step
            data["kernel"]["partWindow"] = [int(x) for x in kernel["part_window"]]
            data["kernel"]["window"] = int(kernel["window"])
    bases: dict = {}
    data["colour"] = [
        bases.setdefault(n.split(":")[0] if _groups(data["seqs"]) else n, len(bases)) % len(PALETTE)
        for n in data["seqs"]
    ]
    data.update(
        title=o.title,
        version=o.version,
        lang=lang,
        groups=_groups(data["seqs"]),
        palette=list(PALETTE),
        free=FREE,
        accent=ACCENT,
        alert=ALERT,
        ui=_ui(lang),
    )
    return data


def _kernel(story: dict, snaps: list, names, lang: str, hybrid: bool) -> dict | None:
    """The kernel's view: story["kernel"] as given (False: none), else computed for the
    story's model shape (story["shape"], `kernel_view.KernelShape`) or SMALL_DECODE, and its
    sliding window (story["window"]; `hybrid`: a hybrid trace's two KV cache groups)."""
    if "kernel" in story:
        return story["kernel"] or None
    from .kernel_view import KernelShape, kernel_story

    shape = story.get("shape")
    return kernel_story(
        snaps,
        KernelShape(*shape) if shape else None,
        names,
        lang=lang,
        window=story.get("window"),
        hybrid=hybrid,
    )


def _trace_seqs(what: str, names: list[str], data: dict) -> None:
    """ValueError unless `names` are sequences of the trace, each named once."""
    if len(set(names)) != len(names) or not set(names) <= set(data["seqs"]):
        raise ValueError(f"{what} names a sequence twice or one not in the trace: {names}"[:200])


def _host(rows, data: dict) -> list:
    """story["host"], checked: each step's swapped-out sequences are the trace's own, each
    named once, with at most the pool's block count (the page draws a tile per host block,
    so a number is never allowed to make more of them than the pool has)."""
    out = []
    for row in rows:
        row = [[str(q), int(n)] for q, n in row]
        _trace_seqs("story.host", [q for q, _ in row], data)
        if not all(0 <= n <= data["nb"] for _, n in row):
            raise ValueError(
                f"story.host: a sequence holds 0..{data['nb']} blocks, got {row}"[:200]
            )
        out.append(row)
    return out


def _timeline(rows, data: dict, steps: int) -> list:
    """story["timeline"], checked: a row per request, each named once (a request that came
    and went within one step is in no snapshot, so a row may name a sequence the trace
    lacks), and its first step, preemptions and finish step positions of the trace (the
    page names each by that step's number, and draws a mark per distinct preemption). A
    parallel sample swapped out with its group is preempted before its own first step."""
    out: list[tuple[str, int, list[int], int]] = [
        (str(q), int(a), sorted({int(x) for x in pre}), int(end)) for q, a, pre, end in rows
    ]
    names = [q for q, _, _, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"story.timeline names a request twice: {names}"[:200])
    for q, first, pre, end in out:
        if not (0 <= first < steps and all(0 <= x < steps for x in pre) and -1 <= end < steps):
            raise ValueError(
                f"story.timeline: {q[:40]!r} is scheduled, preempted or finishes outside "
                f"the trace's {steps} steps"
            )
    return [list(row) for row in out]


def _asset(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


# Characters that JSON may carry raw but that an HTML parser or a JS source reads as markup or
# line ends: "<" (</script>, <!--), ">" and "&", U+2028/U+2029, and lone surrogates (which
# UTF-8 cannot encode). Written as \\uXXXX escapes they mean the same to JSON.parse.
_UNSAFE_IN_SCRIPT = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def _script_json(data: dict) -> str:
    """JSON that is safe inside <script>: nothing in it can end or re-mode the element, and
    every string reads back from JSON.parse exactly as it was (any text, any code point)."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # JSON.parse would refuse the page's data: no page rather than a blank one
        raise ValueError("the page's data holds NaN or Infinity, which JSON cannot carry") from None
    return _UNSAFE_IN_SCRIPT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


TAB_TITLE = 200  # characters of the title in the browser's tab


def _no_surrogates(text: str) -> str:
    """`text` with each lone surrogate (which UTF-8 cannot encode) as U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def to_html(trace_or_snapshots, options: PageOptions | None = None) -> str:
    """One self-contained HTML page for the trace (a `Trace`, a list of `Snapshot`s, or a
    `trace_json.to_dict(trace)` dict). See the module docstring for what it shows and its DOM
    contract, and `PageOptions` for what else it may show."""
    return page_html(page_data(trace_or_snapshots, options))


def page_html(data: dict) -> str:
    """The page around `page_data`'s (or `view.stream.page_data`'s) data; a live stream's
    page (data["stream"]["live"] seconds) reloads itself, as its file is being rewritten."""
    title, lang = data["title"], data["lang"]
    live = (data.get("stream") or {}).get("live") or 0
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="{"zh" if lang == "zh" else "en"}"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        + (f'<meta http-equiv="refresh" content="{int(live)}">\n' if live else "")
        # the page may run its own inline script and style and nothing else: no request leaves
        + '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
        # the tab's title: the page shows the whole title (#title), so a long one is stored once
        f"<title>{html.escape(_no_surrogates(title[:TAB_TITLE]))}</title>\n"
        f"<style>\n{css_root()}{_asset('viewer.css')}</style>\n</head>\n<body>\n"
        f'<script type="application/json" id="trace-data">{_script_json(data)}</script>\n'
        f"<script>\n{_asset('viewer.js')}</script>\n</body></html>\n"
    )


def write_html(path, trace_or_snapshots, options: PageOptions | None = None) -> str:
    """Write `to_html(...)` to `path` (UTF-8); returns the path as a string. A source's page
    (`sources.py`: {"trace_or_snapshots", "options"}) is written by `write_html(path, **page)`."""
    from pathlib import Path

    text = to_html(trace_or_snapshots, options)
    Path(path).write_text(text, encoding="utf-8")
    return str(path)


class View:
    """The page in a notebook: `View(trace)` as a cell's last line shows it, offline.

    The page sits in an iframe's `srcdoc`, so its script runs in its own document (keys,
    URL hash) and nothing is fetched."""

    def __init__(
        self, trace_or_snapshots, options: PageOptions | None = None, *, height: int = 640
    ):
        self.html = to_html(trace_or_snapshots, options)
        self.height = height

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            f'style="width:100%;height:{int(self.height)}px;border:1px solid #ccc" '
            'sandbox="allow-scripts"></iframe>'
        )
