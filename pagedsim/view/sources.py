"""What each command puts on a page: its snapshots, captions, "why" lines, marks and label.

Every function returns one source's page, {"trace_or_snapshots": ..., "options":
`PageOptions`}, which `pagedsim.view.write_html(path, **page)` writes:

    tour(lang)                      the tour's script (its "why" lines, v0 fork, v1 free queue)
    play(session, lang)             a playground `Session`: its timeline, preemption marked,
                                    prefix-cache hashes read from the pool after each command
    events(snapshots)               a replayed vLLM KV event stream (`play --events`)
    generate(engine, marks)         `generate`'s engine steps, blocks labelled with their text,
                                    sequences named as the engine names them ("r0.0")
    saved(data)                     a JSON trace written by `tour --json` or `--trace-out`

`version_of(options)` names the vLLM version each playground mechanism follows. No
matplotlib here.
"""

from __future__ import annotations

from typing import Any

from ..engine.lockstep import seq_name
from ..io.trace_json import snapshot_to_dict
from ..text.captions import caption
from . import PageOptions
from .kernel_view import checked_shape, shape_of
from .narrate import narrate

TOUR_VERSION = "fork + copy-on-write: vLLM v0 · free list: a LIFO stack, as in vLLM v0"
EVENTS_VERSION = "vLLM v1 KV cache events (BlockStored / BlockRemoved / AllBlocksCleared)"
GENERATE_VERSION = {  # the engine's mode: the scheduler that served the run
    "v1": "vLLM v1 scheduler (SchedulerV1) + prefix cache",
    "v0": "vLLM v0 scheduler (SchedulerV0): fork + copy-on-write (n, beams), swap",
}


def version_of(options) -> str:
    """The vLLM version behind a playground's options (`play_session.Options`)."""
    if options.hybrid:
        label = (
            f"vLLM v1 hybrid allocator: full attention + a {options.sliding_window}-token window"
        )
    elif options.enable_prefix_caching:
        label = "vLLM v1 automatic prefix caching (free queue = LRU eviction order)"
    elif options.sliding_window:
        label = f"vLLM v1 sliding window of {options.sliding_window} tokens"
    else:
        label = TOUR_VERSION
    if options.preemption_mode != "none":
        label += f" · preemption by {options.preemption_mode}: vLLM v0 scheduler"
    return label


def _preemption_marks(session) -> dict:
    """Positions in `session.timeline()` whose step preempted a sequence ("pre", and "out"
    when swap sent it to the host) or swapped one back in ("in")."""
    marks, k, pos = {}, 0, 1
    for m in session.moments[: session.cursor]:
        notes = {getattr(n, "template", "") for n in m.notes}  # play_session's Notes
        swapped = "swapped seq {seq} out to the host ({n} blocks)" in notes
        preempting = swapped or "preempted seq {seq}: {n} tokens to recompute" in notes
        back = "swapped seq {seq} back in" in notes
        for i in range(k + 1, m.snapshot + 1):
            if i < m.snapshot or preempting:
                marks[pos] = ["pre", "out"] if swapped else ["pre"]
            elif back:
                marks[pos] = ["in"]
            pos += 1
        k = m.snapshot
    return marks


def _hashes(session) -> list | None:
    """The prefix-cache hash of every block after each timeline step, or None without a
    cache. Replays the session's commands on a fresh manager (it is deterministic)."""
    from ..app.play_session import Session

    if getattr(session.manager, "pool", None) is None or not hasattr(
        session.manager.pool, "hash_of"
    ):
        return None
    twin = Session(session.options)
    out: list[tuple[str, ...]] = [()]  # the empty pool
    for m in session.moments[: session.cursor]:
        twin.run(m.command)
        pool: Any = twin.manager.pool  # a caching pool: checked by hasattr above
        n = twin.manager.num_gpu_blocks
        now = tuple(
            format(pool.hash_of(b) & 0xFFFFFFFF, "08x") if pool.is_cached(b) else ""
            for b in range(n)
        )
        out += [now] * (m.snapshot + 1 - len(out))
    return out


def _host(snaps: list, marks: dict) -> list:
    """What the host holds after each timeline step under swap preemption: [[seq, blocks],
    ...], from the steps marked "out" (the sequence the step freed, with its table's length)
    and "in" (the sequence the step added back)."""
    held: dict = {}
    out = []
    for pos, snap in enumerate(snaps):
        kinds = marks.get(pos, ())
        if "out" in kinds and pos > 0:
            sizes = {s.seq_id: len(s.blocks) for s in snaps[pos - 1].sequences}
            for e in snap.events:
                if e.kind == "sequence_freed":
                    held[e.seq_id] = sizes.get(e.seq_id, 0)
        if "in" in kinds:
            for e in snap.events:
                if e.kind == "sequence_added":
                    held.pop(e.seq_id, None)
        out.append([[str(q), n] for q, n in held.items()])
    return out


def play(session, lang: str = "en", title: str = "pagedsim play") -> dict:
    snaps = session.timeline(lang)
    marks = _preemption_marks(session)
    host = _host(snaps, marks)
    story: dict[str, Any] = {"host": host} if any(host) else {}
    if session.options.sliding_window:  # what its layers read, for the kernel's view
        story["window"] = int(session.options.sliding_window)
    options = PageOptions(
        lang=lang,
        title=title,
        version=version_of(session.options),
        marks=marks,
        hashes=_hashes(session),
        story=story or None,
    )
    return {"trace_or_snapshots": snaps, "options": options}


def events(snapshots, lang: str = "en", title: str = "pagedsim play --events") -> dict:
    options = PageOptions(
        lang=lang,
        title=title,
        version=EVENTS_VERSION,
        captions=[f"event {s.step}: {caption(s, lang)}" for s in snapshots],
    )
    return {"trace_or_snapshots": snapshots, "options": options}


def generate(engine, steps, lang: str = "en") -> dict:
    """A traced LLM's run as a page: `engine` is its llm_engine, `steps` its steps."""
    from ..engine.generate import step_frames

    frames = step_frames(engine, steps)
    told = narrate(frames, engine.log)
    flags = {
        i: ["pre"]
        for i, rec in enumerate(engine.log)
        if any(k.startswith("preempted") and v for k, v in rec.items())
    }
    for i, kinds in told.swaps.items():  # swapped out to the host ("out") and back ("in")
        flags[i] = flags.get(i, []) + kinds
    # the kernel's view: one layer of the served model, K/V float32 as the engine keeps them
    shape = list(shape_of(engine.model.config, dtype_bytes=4))
    # a row per request scheduled, one that came and went within a step too (no table holds it)
    story = {"details": told.details, "timeline": told.timeline, "shape": shape}
    if any(told.host):
        story["host"] = told.host
    options = PageOptions(
        lang=lang,
        version=GENERATE_VERSION[engine.mode],
        title="pagedsim generate: the blocks serving a model",
        marks=flags,
        labels=[getattr(f, "block_labels", ()) for f in frames],
        captions=told.captions,
        story=story,
        names=seq_name,  # "r0.0", as the captions, hover text and timeline say
    )
    return {"trace_or_snapshots": frames, "options": options}


def saved(data: dict, lang: str = "en", title: str = "pagedsim trace") -> dict:
    """A saved trace: `tour --json`'s {"events", "snapshots"}, or `--trace-out`'s, which adds
    an optional "view" object {"title", "version", "whys", "marks", "labels", "hashes"}."""
    from ..io.trace_json import snapshots_from_dict

    snaps = snapshots_from_dict(data)
    view = data.get("view") or {}
    if not isinstance(view, dict):
        raise ValueError("'view' must be an object")
    out: dict[str, Any] = dict(
        lang=lang, title=_text(view, "title", title), version=_text(view, "version", "")
    )
    whys = view.get("whys")
    if whys is not None:
        if not isinstance(whys, list) or not all(isinstance(w, (str, type(None))) for w in whys):
            raise ValueError("view.whys must be a list of text")
        out["whys"] = whys
    marks = view.get("marks") or {}
    if not isinstance(marks, dict) or not all(
        str(k).isdigit() and isinstance(v, list) and set(v) <= {"oob", "pre", "out", "in"}
        for k, v in marks.items()
    ):
        raise ValueError(
            'view.marks must map step positions to lists of "oob" / "pre" / "out" / "in"'
        )
    out["marks"] = {int(k): v for k, v in marks.items()}
    if view.get("story") is not None:
        out["story"] = _story(view["story"], len(snaps))
    for key in ("labels", "hashes"):
        per_step = view.get(key)
        if per_step is None:
            continue
        if (
            not isinstance(per_step, list)
            or len(per_step) > len(snaps)
            or not all(
                isinstance(row, list) and all(isinstance(x, str) for x in row) for row in per_step
            )
        ):
            raise ValueError(f"view.{key} must be a list (one per step) of lists of text")
        out[key] = per_step
    return {"trace_or_snapshots": snaps, "options": PageOptions(**out)}


STORY_KEYS = {"details", "timeline", "host", "shape", "window"}


def _story(story, steps: int) -> dict:
    """view.story, checked: {"details": [text per step], "timeline": [[seq, first, [steps],
    last], ...], "host": ..., "shape": `kernel_view.KernelShape`'s five numbers, "window":
    the sliding window's tokens} with every step position inside the trace."""
    bad = ValueError(
        'view.story must be {"details": [text, ...], "timeline": [[seq, step, [steps], step]]}'
    )
    if not isinstance(story, dict) or set(story) - STORY_KEYS:
        raise bad
    details, rows = story.get("details", []), story.get("timeline", [])
    if not isinstance(details, list) or not all(isinstance(d, str) for d in details):
        raise bad
    if not isinstance(rows, list):
        raise bad
    for row in rows:
        if not (
            isinstance(row, list)
            and len(row) == 4
            and isinstance(row[0], str)
            and isinstance(row[2], list)
        ):
            raise bad
        for x in [row[1], *row[2], row[3]]:
            if isinstance(x, bool) or not isinstance(x, int) or not -1 <= x < steps:
                raise bad
    host = story.get("host", [])
    if not isinstance(host, list) or not all(
        isinstance(row, list)
        and all(
            isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and _whole(x[1])
            for x in row
        )
        for row in host
    ):
        raise bad
    out = {"details": details[:steps], "timeline": rows, "host": host[:steps]}
    if "shape" in story:  # the served model's attention shape, for the kernel's view
        out["shape"] = list(checked_shape(story["shape"]))
    if "window" in story:  # the sliding window its layers read, for the kernel's view
        if not _whole(story["window"]) or story["window"] < 1:
            raise ValueError("view.story.window must be a whole number of tokens, 1..1048575")
        out["window"] = story["window"]
    return out


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 20


def _text(view: dict, key: str, default: str) -> str:
    value = view.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"view.{key} must be text")
    return value


# the fields of a snapshot's events that hold a sequence id (pagedsim/trace.py)
SEQ_FIELDS = ("seq_id", "parent", "child")


def _named(d: dict, name) -> dict:
    """A snapshot dict whose sequence ids are the names the page shows (`generate`'s manager
    ids (1, 0) become "r1.0"), so a saved trace names its sequences as its page did."""
    for s in d["sequences"]:
        s["seq_id"] = name(s["seq_id"])
    for e in d["events"]:
        for key in SEQ_FIELDS:
            if key in e:
                e[key] = name(e[key])
    return d


def trace_out(page: dict) -> dict:
    """A source's page as a JSON trace for `--trace-out` (read back by `saved`). With
    `PageOptions.names` the sequences are saved under those names. "snapshots" comes first:
    `pagedsim view` tells a trace from a KV event stream by it (`kv_stream.batches_in`)."""
    snaps, o = page["trace_or_snapshots"], page["options"]
    view: dict[str, Any] = {"title": o.title, "version": o.version}
    if o.whys:
        view["whys"] = list(o.whys)
    if o.marks:
        view["marks"] = {str(k): list(v) for k, v in o.marks.items()}
    for key in ("labels", "hashes"):
        if getattr(o, key):
            view[key] = [[str(x) for x in row] for row in getattr(o, key)]
    if o.story:
        view["story"] = o.story
    snapshots = []
    for i, s in enumerate(snaps):
        d = snapshot_to_dict(s) if o.names is None else _named(snapshot_to_dict(s), o.names)
        d.pop("block_labels", None)  # generate's, kept in view.labels
        if o.captions:
            d["custom_caption"] = o.captions[i]
        snapshots.append(d)
    return {
        "snapshots": snapshots,
        "events": [e for d in snapshots for e in d["events"]],
        "view": view,
    }
