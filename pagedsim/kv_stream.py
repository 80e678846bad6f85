"""A vLLM KV event stream as it travels: ZMQ messages, captures of them, and their order.

vLLM v1's `ZmqEventPublisher` (`vllm/distributed/kv_events.py`) sends each `KVEventBatch`
as one ZMQ message of three frames: topic, seq (8 bytes big-endian) and the msgpack
payload; its replay socket ends a replay with seq -1. A capture (`.kvcap`) keeps the
messages byte for byte after `MAGIC`, each frame length-prefixed (`write_message`).
msgpack is decoded by msgspec into plain data and checked like JSON, within MAX_PAYLOAD
and MAX_DEPTH; nothing is unpickled or evaluated, and ext types (vLLM sends none) are
refused. Hashes and extra keys sent as bytes become hex text.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from .kv_events import Batch, batch_of, read_batches, same_rank

MAGIC = b"pagedsim-kv-capture/1\n"
REPLAY_MARK = b"replay"
MAX_FRAME = 64 << 20  # bytes in one frame of a capture (ZMQ's limit on the subscriber too)
MAX_PAYLOAD = 16 << 20  # bytes in one msgpack batch (vLLM's are kilobytes)
MAX_DEPTH = 32  # nesting in one payload (a batch needs 4)
END_SEQ = -1  # the seq of a replay's end marker
STREAM_LINE = (b'{"ts"', b'{"events"', b'{"type"', b'["')  # how a stream's line begins
EXTRA = "events"  # the pyproject extra that brings msgspec and pyzmq


def need(module: str) -> Any:
    """Import msgspec or zmq, or one line saying which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        name = {"zmq": "pyzmq"}.get(module, module)
        raise ValueError(
            f"{name} is needed for vLLM's msgpack / ZMQ streams: pip install 'pagedsim[{EXTRA}]'"
        ) from None


def decode_payload(payload: bytes) -> Batch:
    """One msgpack KVEventBatch as a checked `Batch`; ValueError if it is not one."""
    msgspec = need("msgspec")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"a payload of {len(payload):,} bytes (over {MAX_PAYLOAD >> 20} MiB)")
    try:
        obj = msgspec.msgpack.decode(payload)
    except (msgspec.DecodeError, RecursionError) as e:
        raise ValueError(f"not msgpack ({str(e)[:80]})") from None
    _check_plain(obj, msgspec.msgpack.Ext)
    return batch_of(_bytes_as_text(obj))


def _check_plain(obj: object, ext: type, depth: int = 0) -> None:
    """Plain data only: nesting at most MAX_DEPTH, text map keys, no ext types."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} arrays or maps")
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"a map key must be text, got {type(k).__name__}")
            _check_plain(v, ext, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            _check_plain(v, ext, depth + 1)
    elif isinstance(obj, ext):
        raise ValueError(
            f"msgpack ext type {getattr(obj, 'code', '?')} is not part of vLLM's format"
        )
    elif isinstance(obj, datetime):  # msgspec reads ext type -1 as a timestamp
        raise ValueError("msgpack ext type -1 (a timestamp) is not part of vLLM's format")


def _bytes_as_text(obj: object) -> object:
    """Block hashes sent as msgpack bytes (vLLM's ExternalBlockHash may be bytes) and extra
    keys sent as bytes (a prompt-embeds digest), as hex text."""
    if isinstance(obj, dict):
        events = obj.get("events", [obj])
    else:
        events = obj[1] if isinstance(obj, list) and len(obj) >= 2 else [obj]
    for e in events if isinstance(events, list) else ():
        if not isinstance(e, dict):
            continue
        if isinstance(e.get("block_hashes"), list):
            e["block_hashes"] = [_hex(h) for h in e["block_hashes"]]
        if "parent_block_hash" in e:
            e["parent_block_hash"] = _hex(e["parent_block_hash"])
        if isinstance(e.get("extra_keys"), list):
            e["extra_keys"] = [_hex(k) for k in e["extra_keys"]]
    return obj


def _hex(value: object) -> object:
    """bytes as hex text, inside arrays too (extra keys nest two deep)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, list):
        return [_hex(v) for v in value]
    return value


# ---- messages and captures ---------------------------------------------------------------


def batch_of_message(frames: list[bytes], replayed: bool = False) -> Batch | None:
    """A batch from one ZMQ message (topic, seq, payload); None for a replay's end marker.
    ValueError if the message is not vLLM's shape."""
    if len(frames) != 3:
        raise ValueError(
            f"a KV event message has 3 frames (topic, seq, payload), got {len(frames)}"
        )
    topic, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise ValueError(f"the seq frame must be 8 bytes, got {len(seq_bytes)}")
    seq = int.from_bytes(seq_bytes, "big", signed=True)
    if seq == END_SEQ:
        return None
    if seq < 0:
        raise ValueError(f"seq {seq} is negative (only -1, a replay's end, may be)")
    try:
        text = topic.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the topic is not UTF-8 text") from None
    batch = decode_payload(payload)
    batch.seq, batch.topic, batch.replayed = seq, text, replayed
    return batch


def write_message(f: BinaryIO, frames: list[bytes], replayed: bool = False) -> None:
    """Append one message to a capture (write MAGIC first, once)."""
    frames = list(frames) + ([REPLAY_MARK] if replayed else [])
    f.write(struct.pack(">I", len(frames)))
    for frame in frames:
        f.write(struct.pack(">I", len(frame)))
        f.write(frame)


def read_capture(data: bytes) -> list[tuple[list[bytes], bool]]:
    """The messages of a capture, each (frames, replayed); ValueError naming the message."""
    if not data.startswith(MAGIC):
        raise ValueError("not a pagedsim KV capture (no header)")
    out: list[tuple[list[bytes], bool]] = []
    pos = len(MAGIC)
    while pos < len(data):
        where = f"message {len(out) + 1} (byte {pos})"
        count, pos = _u32(data, pos, where)
        if not 1 <= count <= 4:
            raise ValueError(f"{where}: {count} frames (a message has 3, or 4 if replayed)")
        frames = []
        for _ in range(count):
            size, pos = _u32(data, pos, where)
            if size > MAX_FRAME or pos + size > len(data):
                raise ValueError(f"{where}: a frame of {size} bytes runs past the capture")
            frames.append(data[pos : pos + size])
            pos += size
        replayed = len(frames) == 4 and frames[3] == REPLAY_MARK
        out.append((frames[:3] if replayed else frames, replayed))
    return out


def _u32(data: bytes, pos: int, where: str) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise ValueError(f"{where}: the capture ends inside a length")
    return struct.unpack_from(">I", data, pos)[0], pos + 4


def batches_of_capture(data: bytes) -> list[Batch]:
    """The batches of a capture (a replay's end marker is kept as an empty batch, seq -1)."""
    out: list[Batch] = []
    rank: int | None = None
    for i, (frames, replayed) in enumerate(read_capture(data), 1):
        try:
            batch = batch_of_message(frames, replayed)
            rank = rank if batch is None else same_rank(batch, rank)
        except ValueError as e:
            raise ValueError(f"message {i}: {e}") from None
        out.append(batch if batch is not None else Batch([], seq=END_SEQ, replayed=True))
    return out


def read_any(path: Path, max_bytes: int) -> list[Batch] | None:
    """The batches of a capture or of JSON lines; None if the file is one JSON document
    with "snapshots" (a trace, not a stream). ValueError for anything else."""
    from .io.trace_json import read_bounded

    return batches_in(read_bounded(path, max_bytes, "stream"))


def batches_in(data: bytes) -> list[Batch] | None:
    """`read_any` on a file's bytes, already read (and bounded) by the caller."""
    if data.startswith(MAGIC):
        return batches_of_capture(data)
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head not in (b"{", b"["):
        raise ValueError("neither a capture, JSON lines nor a JSON trace")
    if b'"snapshots"' in data[:4096] or _one_document(data):
        return None
    return read_batches(data.splitlines())


def _one_document(data: bytes) -> bool:
    """Whether the file is a single JSON document spread over several lines (a trace)."""
    import json

    lines = [line for line in data.splitlines() if line.strip()]
    if len(lines) < 2 or lines[0].lstrip(b"\xef\xbb\xbf \t").startswith(STREAM_LINE):
        return False  # a stream's line (a cut one is then refused naming its line)
    try:
        json.loads(lines[0])
    except (ValueError, RecursionError):
        return True  # its first line is not a whole value: one document over many lines
    return False


# ---- sequence numbers ------------------------------------------------------------------------


def sequence_notes(batches: Iterable[Batch]) -> Iterator[tuple[Batch, list[str]]]:
    """Each batch with what its seq says after the ones before: a message refused, a gap
    (batches never received), a seq seen again (a replay or a restarted publisher), a
    replay's end."""
    last: int | None = None
    for b in batches:
        notes = []
        if b.refused is not None:
            notes.append(f"seq {b.seq} refused: {b.refused}")
        if b.unread:
            notes.append(f"read past fields pagedsim does not know: {', '.join(b.unread)}")
        if b.seq == END_SEQ:
            notes.append("replay ended (seq -1)")
        elif b.seq is not None:
            if last is None and b.seq > 0:
                notes.append(f"seq {b.seq} first: batches 0-{b.seq - 1} never arrived")
            elif last is not None and b.seq > last + 1:
                missing = b.seq - last - 1
                notes.append(
                    f"seq gap: {missing:,} batch{'es' if missing > 1 else ''} "
                    f"({last + 1}-{b.seq - 1}) never arrived"
                )
            elif last is not None and b.seq <= last:
                notes.append(f"seq {b.seq} again after {last} (a replay or a restarted publisher)")
            if b.replayed:
                notes.append(f"seq {b.seq} came from the replay socket")
            last = b.seq  # after a seq seen again, a new run of the publisher
        yield b, notes
