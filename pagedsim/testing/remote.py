"""Code under test in another process: the checks call it through a socket, never share memory.

`pagedsim check --impl`, `pagedsim grade` (course/isolation.py) and `pagedsim conform`
run the checks (pytest and Hypothesis included) in the grader's process and the code
under test in a child process (started by `serve`). The two talk over one socket, in
messages that are pickles:

    getattr / setattr / call / special (len, [], iter, ==, repr, ...)   on an object
    import_impl, import_module, stepper_run                             child-only helpers

A value crosses by copy when it is plain data (None, numbers, str, bytes, tuples, lists,
dicts, sets, paths, NumPy arrays and scalars) and by *handle* otherwise: the receiver gets
a proxy (`Remote`) whose every use is a message back. Lists, dicts, sets and arrays passed
as arguments are copied back after the call (the callee may append to them), and a result
that *is* one of the arguments comes back as that very object. An exception crosses as
its class (a student's own exception class becomes a local stand-in with the same name and
base), its arguments, and the lines of the student's file it passed through, re-raised here
from frames with that file name, so the runner's messages ("... (line 12 of your file)",
"not implemented yet: allocate") read exactly as they do in-process.

The grader never trusts what comes back: it unpickles with a short allow-list (plain data,
NumPy's array constructors, exception classes already imported from the standard library,
pagedsim or course), and serves the child only public attributes of the objects it handed
over (no `__globals__`, no classes, no modules), so a submission cannot reach the grader's
code. The child trusts the grader.

The pieces: remote_values.py (what crosses by copy, the allow-list, the write-back of
mutable arguments), remote_errors.py (exceptions both ways), remote_proxy.py (`Remote`,
`RemoteModule`, `ask`), and here the pickler, the channel and the child's `serve` loop.
Every name stays importable from this module.
"""

from __future__ import annotations

import builtins
import io
import pickle
import socket
import struct
import sys
import types

import numpy as np

from .remote_errors import DEPTH, build_exception, encode_exception, raise_from_frames
from .remote_proxy import Remote, RemoteModule, _Raised, ask
from .remote_values import (
    EXC_MODULES,
    MUTABLE,
    OPERATORS,
    PLAIN,
    SAFE_GLOBALS,
    SPECIAL,
    ChildDied,
    RemoteError,
    _collect_back,
    _exc_class_by_value,
    _safe_global,
    _Unpickler,
    _write_back,
    is_plain,
)


class _Pickler(pickle.Pickler):
    def __init__(self, file, channel, aliases):
        super().__init__(file, protocol=4)
        self.ch, self.aliases = channel, aliases

    def persistent_id(self, obj):
        if isinstance(obj, RemoteModule):
            obj = obj.__dict__["_remote"]
        if isinstance(obj, Remote) and object.__getattribute__(obj, "_ch") is self.ch:
            return ("their", object.__getattribute__(obj, "_id"))
        if id(obj) in self.aliases and self.aliases[id(obj)][1] is obj:
            return ("arg", self.aliases[id(obj)][0])
        if is_plain(obj) or _safe_global(obj):
            return None
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return None if _exc_class_by_value(obj) else self.ch.class_pid(obj)
        if isinstance(obj, BaseException) and _exc_class_by_value(type(obj)):
            return None
        kind = (
            "module"
            if isinstance(obj, types.ModuleType)
            else "function"
            if isinstance(obj, types.FunctionType)
            else "object"
        )
        return ("mine", self.ch.export(obj), kind, getattr(obj, "__name__", type(obj).__name__))


class Channel:
    """One end of the socket: sends requests, serves the other end's requests while it waits."""

    def __init__(self, sock: socket.socket, *, trusting: bool, on_dead=None):
        self.sock, self.trusting, self.on_dead = sock, trusting, on_dead
        self.exports: dict[int, object] = {}
        self.proxies: dict[
            int, object
        ] = {}  # their id -> our proxy (stand-in classes stay the same class)
        self.seq, self.dead = 0, None  # dead: why this channel can no longer be used
        self.helpers: dict = {}  # op -> function, for the child's extra requests

    # -- encoding ---------------------------------------------------------------------------------
    def export(self, obj) -> int:
        key = id(obj)
        self.exports[key] = obj
        return key

    def class_pid(self, cls):
        bases = tuple(
            b if _exc_class_by_value(b) else self.class_pid(b)
            for b in cls.__bases__
            if issubclass(b, BaseException)
        )
        bases = tuple(
            ("global", b.__module__, b.__qualname__) if isinstance(b, type) else b for b in bases
        )
        return ("mine", self.export(cls), "excclass", cls.__name__, bases)

    def dumps(self, obj, aliases=None) -> bytes:
        buf = io.BytesIO()
        _Pickler(buf, self, aliases or {}).dump(obj)
        return buf.getvalue()

    def loads(self, data: bytes, args=()):
        return _Unpickler(io.BytesIO(data), self, args).load()

    def resolve(self, pid, args):
        if not isinstance(pid, tuple) or not pid:
            raise RemoteError("a malformed reference")
        if pid[0] == "their":
            if pid[1] not in self.exports:
                raise RemoteError("a reference to an object that was never handed over")
            return self.exports[pid[1]]
        if pid[0] == "arg":
            return args[pid[1]]
        if pid[0] != "mine":
            raise RemoteError("a malformed reference")
        key, kind = pid[1], pid[2]
        if key not in self.proxies:
            self.proxies[key] = self._make_proxy(key, kind, pid)
        return self.proxies[key]

    def _make_proxy(self, key, kind, pid):
        if kind == "excclass":
            bases = tuple(self._base(b) for b in pid[4]) or (Exception,)
            return type(str(pid[3]), bases, {"__module__": "submission", "_remote": (self, key)})
        if kind == "module":
            return RemoteModule(self, key, str(pid[3]))
        if kind == "function" and self.trusting:  # a real function, so it binds as a method
            proxy = Remote(self, key, str(pid[3]))
            return lambda *a, **k: proxy(*a, **k)
        return Remote(self, key, str(pid[3]))

    def _base(self, b):
        if b[0] == "global":
            mod = sys.modules.get(b[1])
            cls = getattr(mod, b[2], None) if mod else getattr(builtins, b[2], None)
            return cls if isinstance(cls, type) and issubclass(cls, BaseException) else Exception
        return self.resolve(b, ())

    # -- the conversation ------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        self.sock.sendall(struct.pack("!Q", len(data)) + data)

    def _recv(self) -> bytes:
        head = self._exact(8)
        return self._exact(struct.unpack("!Q", head)[0])

    def _exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            part = self.sock.recv(min(n - got, 1 << 20))
            if not part:
                raise ChildDied("the other process closed the connection")
            chunks.append(part)
            got += len(part)
        return b"".join(chunks)

    def request(self, op: str, *payload):
        """Ask the other end; serve its requests until our reply arrives."""
        if self.dead:
            raise ChildDied(self.dead)
        self.seq += 1
        mine = self.seq
        args = payload[1] if op == "call" else payload[2] if op == "special" else ()
        try:
            self._send(b"R" + self.dumps(("req", mine, op, payload)))
            while True:
                head, data = self._recv_message()
                if head == "req":
                    self._serve(data)
                    continue
                return self._finish(data, mine, args, op, payload)
        except _Raised:
            raise
        except Exception as e:  # noqa: BLE001 - a dead peer, or a message we refuse: the conversation is over
            self.kill(f"{type(e).__name__}: {e}")
            raise ChildDied(self.dead) from None
        except BaseException:  # a time limit (or Ctrl-C) interrupted the conversation midway
            self.kill("stopped at a time limit")
            raise

    def _recv_message(self):
        data = self._recv()
        return ("req" if data[:1] == b"R" else "rep"), data[1:]

    def _finish(self, data, mine, args, op, payload):
        kind, seq, value, back = self.loads(data)
        if seq != mine:
            raise RemoteError("a reply out of order")
        if op == "call":
            _write_back(payload[1], payload[2], back)
        value = self.loads(value, args)
        if kind == "ok":
            return value
        raise _Raised(build_exception(value, self))

    def kill(self, why: str) -> None:
        self.dead = self.dead or why
        try:
            self.sock.close()
        finally:
            if self.on_dead:
                self.on_dead()

    def _serve(self, data: bytes) -> None:
        seq, back, aliases, args = 0, {}, {}, ()
        try:
            _req, seq, op, payload = self.loads(data)
            args = payload[1] if op == "call" else ()
            value = self.perform(op, payload)
            if op == "call":
                back = _collect_back(payload[1], payload[2])
                aliases = {
                    id(a): (i, a) for i, a in enumerate(payload[1]) if isinstance(a, MUTABLE)
                }
            reply = ("ok", seq, value, back)
        except BaseException as e:  # noqa: BLE001 - every failure goes back as the caller's exception
            if isinstance(e, KeyboardInterrupt) and not self.trusting:
                raise
            reply = ("err", seq, encode_exception(e, self), back)
        try:
            out = self.dumps((reply[0], seq, self.dumps(reply[2], aliases), back))
        except Exception as e:  # noqa: BLE001 - an unpicklable result
            failed = encode_exception(TypeError(f"a value could not be sent back: {e}"), self)
            out = self.dumps(("err", seq, self.dumps(failed), {}))
        del args
        self._send(b"P" + out)

    def perform(self, op, payload):
        if op in self.helpers and self.trusting:
            return self.helpers[op](*payload)
        obj = payload[0]
        if not self.trusting and not _served(obj, op, payload):
            raise PermissionError(f"the grader does not serve {op} {payload[1]!r} on this object")
        if op == "getattr":
            value = getattr(obj, payload[1])
            if not self.trusting and isinstance(value, (type, types.ModuleType, types.CodeType)):
                raise PermissionError(f"the grader does not hand out {payload[1]!r}")
            return value
        if op == "setattr":
            return setattr(obj, payload[1], payload[2])
        if op == "call":
            return obj(*payload[1], **payload[2])
        if op == "special":
            return OPERATORS[payload[1]](obj, *payload[2])
        if op == "asarray":
            return np.asarray(obj)
        raise PermissionError(f"unknown request {op!r}")


def serve(fd: int, helpers: dict) -> None:
    """The child's whole life: stdin/stdout/stderr to /dev/null ($PAGEDSIM_CHILD_OUTPUT, for
    debugging, takes the output instead), then serve requests until the socket closes."""
    import os

    sock = socket.socket(fileno=fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    out = os.environ.get("PAGEDSIM_CHILD_OUTPUT")
    out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if out else null
    for std in (1, 2):
        os.dup2(out, std)
    ch = Channel(sock, trusting=True)
    ch.helpers.update(helpers)
    while True:
        try:
            head, data = ch._recv_message()
        except (ChildDied, OSError):
            os._exit(0)
        if head == "req":
            ch._serve(data)


def _served(obj, op, payload) -> bool:
    """What the grader lets the child do with an object the grader handed over."""
    if isinstance(obj, (type, types.ModuleType)):
        return False
    if op == "getattr":
        return isinstance(payload[1], str) and not payload[1].startswith("_")
    if op == "special":
        return payload[1] in SPECIAL
    return op in ("call", "asarray")


__all__ = ["DEPTH", "EXC_MODULES", "MUTABLE", "OPERATORS", "PLAIN", "SAFE_GLOBALS", "SPECIAL",
           "Channel", "ChildDied", "Remote", "RemoteError", "RemoteModule", "ask",
           "build_exception", "encode_exception", "is_plain", "raise_from_frames", "serve"]
