"""Subscribe to a vLLM server's KV events over ZMQ, as vLLM's `kv_events_subscriber` example does.

vLLM v1's `ZmqEventPublisher` binds a wildcard endpoint ("tcp://*:5557") and connects to
any other, so the subscriber connects to the first and binds (`bind=True`) for the second.
With a replay endpoint (a ROUTER) a gap in the sequence numbers is asked back. `entries`
are in publisher order (a restarted publisher's batches follow, noted, never dropped as
replays).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from .kv_events import Batch, same_rank
from .kv_stream import END_SEQ, MAGIC, MAX_FRAME, batch_of_message, need, write_message

MAX_REASON = 200  # characters of a refusal kept for the page


@dataclass
class Entry:
    frames: list[bytes]  # the message as received (topic, seq, payload)
    replayed: bool
    batch: Batch


@dataclass
class Subscriber:
    endpoint: str
    topic: str = ""
    bind: bool = False
    replay_endpoint: str | None = None
    entries: list[Entry] = field(default_factory=list)
    refused: int = 0
    num_events: int = 0
    _held: set[int] = field(default_factory=set)  # seqs received
    _next: int | None = None  # the seq expected next from the PUB socket
    _rank: int | None = None  # the publisher's data-parallel rank, once told
    _run: int = 0  # the entry where the publisher's current run (from its restart) begins
    _asking: bool = False  # a replay request is being answered
    _asked_from: int | None = None  # the seq the last replay request started at

    def __post_init__(self) -> None:
        zmq = need("zmq")

        need("msgspec")
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, 0)  # never drop a batch while the page is written
        self._sub.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)  # a bigger one: ZMQ drops the peer
        self._sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode("utf-8"))
        try:
            (self._sub.bind if self.bind else self._sub.connect)(self.endpoint)
            self._replay = None
            if self.replay_endpoint:
                self._replay = self._ctx.socket(zmq.DEALER)
                self._replay.connect(self.replay_endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise ValueError(f"{self.endpoint}: {e}") from None
        self._poller = zmq.Poller()
        self._poller.register(self._sub, zmq.POLLIN)
        if self._replay is not None:
            self._poller.register(self._replay, zmq.POLLIN)

    def poll(self, timeout_ms: int) -> int:
        """Take every message waiting (up to timeout_ms for the first); the batches added."""
        added = 0
        ready = dict(self._poller.poll(timeout_ms))
        while ready:
            if self._sub in ready:
                added += self.take(self._sub.recv_multipart(), replayed=False)
            if self._replay is not None and self._replay in ready:
                frames = self._replay.recv_multipart()
                added += self.take(frames[1:] if frames[:1] == [b""] else frames, replayed=True)
            ready = dict(self._poller.poll(0))
        return added

    def take(self, frames: list[bytes], replayed: bool) -> int:
        """One message as received; the batches added (0 or 1). A message that is not vLLM's
        shape is counted in `refused`, told on stderr, and, where its seq can be read, kept
        as an empty batch whose `refused` the page shows at that seq (not as a gap)."""
        try:
            batch = batch_of_message(frames, replayed)
            if batch is not None:
                self._rank = same_rank(batch, self._rank)
        except ValueError as e:
            self.refused += 1
            print(f"pagedsim: a KV event message refused: {e}", file=sys.stderr)
            seq = _seq_of(frames)
            if seq is None:
                return 0
            batch = Batch([], seq=seq, replayed=replayed, refused=str(e)[:MAX_REASON])
        if batch is None:  # a replay's end marker
            self._asking = False
            self._ask_again()
            return 0
        seq = batch.seq if batch.seq is not None else END_SEQ
        if not replayed and self._next is not None and seq < self._next:
            self._run = len(self.entries)  # the publisher restarted: its seqs begin again
            self._held, self._asked_from = set(), None
        if seq in self._held:
            return 0  # a replay of a batch already here
        if not replayed and self._next is not None and seq > self._next:
            self._ask(self._next)
        if not replayed and self._next is None and seq > 0:
            self._ask(0)
        self._held.add(seq)
        at = len(self.entries)
        if replayed:  # put it where its seq belongs, within this run of the publisher
            while at > self._run and (self.entries[at - 1].batch.seq or 0) > seq:
                at -= 1
        self.entries.insert(at, Entry(list(frames), replayed, batch))
        if not replayed:
            self._next = seq + 1
        self.num_events += len(batch.events)
        return 1

    def _ask(self, start: int) -> None:
        if self._replay is None or self._asking:
            return
        self._asking, self._asked_from = True, start
        self._replay.send_multipart([b"", start.to_bytes(8, "big")])

    def _ask_again(self) -> None:
        """After a replay: ask from the first seq still missing past the last request's
        start (a gap that opened while it was answered). One below it was not in vLLM's
        buffer any more, so it is never asked twice: the page notes it as a gap."""
        if self._asked_from is None or self._next is None:
            return
        missing = (s for s in range(self._asked_from + 1, self._next) if s not in self._held)
        start = next(missing, None)
        if start is not None:
            self._ask(start)

    def batches(self) -> list[Batch]:
        return [e.batch for e in self.entries]

    def save(self, path: str | os.PathLike[str]) -> None:
        """The messages as a capture (`kv_stream`), in publisher order."""
        with open(path, "wb") as f:
            f.write(MAGIC)
            for e in self.entries:
                if e.batch.refused is None:  # a refused message is in the JSON-lines form
                    write_message(f, e.frames, e.replayed)

    def close(self) -> None:
        self._ctx.destroy(linger=0)


def _seq_of(frames: list[bytes]) -> int | None:
    """The seq of a message whose payload was refused, if its seq frame is readable."""
    if len(frames) != 3 or len(frames[1]) != 8:
        return None
    seq = int.from_bytes(frames[1], "big", signed=True)
    return seq if seq >= 0 else None
