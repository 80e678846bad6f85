"""Code under test in another process: the checks call it through a socket, never share memory.

`pagedsim check --impl`, `pagedsim grade` (course/isolation.py) and `pagedsim conform`
run the checks in the grader's process and the code under test in a child (`serve`). The
two talk over one socket, in length-prefixed JSON messages (remote_codec.py), both ways:

    ["R", seq, op, payload]      getattr / setattr / call / special (len, [], iter, ==, ...)
                                 on an object; import_impl, import_module, stepper_run: the
                                 child-only helpers
    ["P", "ok"|"err", seq, value, arguments written back]

Data crosses by copy, anything else by *handle*: a proxy (remote_proxy.py) whose every use
is a message back. Lists, dicts, sets and arrays passed as arguments are copied back after
the call; an exception crosses as data, re-raised from frames named like the student's
file (remote_errors.py). The grader's end trusts nothing it reads: the decoder builds only
the codec's table, a message over the limit is refused unread, anything malformed ends the
conversation (`Channel.refused` says why), and the child is served only capabilities
(remote_caps.py). Neither side ever unpickles.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import audit
from .remote_caps import ARRAY, CALL, Callback, Method, served, surface_of
from .remote_codec import DEFAULT_LIMIT, Decoder, Encoder, dump_message, load_message
from .remote_errors import DEPTH, build_exception, class_from, class_node, encode_exception
from .remote_proxy import Remote, RemoteModule, _Raised, ask
from .remote_values import (
    MUTABLE,
    OPERATORS,
    SPECIAL,
    ChildDied,
    RemoteError,
    _collect_back,
    _write_back,
)


class Channel:
    """One end of the socket: sends requests, serves the other end's requests while it waits.

    `limit` bounds one message from the other end (an untrusting end only): a longer one is
    refused before it is read, and `refused` says why the conversation ended that way."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        trusting: bool,
        on_dead: Callable[[], None] | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.sock, self.trusting, self.on_dead, self.limit = sock, trusting, on_dead, limit
        self.exports: dict[int, object] = {}
        # their id -> our proxy (stand-in exception classes stay the same class)
        self.proxies: dict[int, Any] = {}
        self.seq = 0
        self.dead: str | None = None  # why this channel can no longer be used
        self.refused: str | None = None  # a message from the other end that was not read
        self.helpers: dict[str, Callable[..., Any]] = {}  # op -> function: the child's requests
        self.on_error: Callable[[BaseException], None] | None = None  # each exception of theirs
        self.impl_file: str | None = None  # the file under test (its frames in tracebacks)
        # while serving an untrusting end's requests or reading its replies (audit.py)
        self.guard = contextlib.nullcontext if trusting else audit.serving
        self._methods: dict[tuple[int, str], Method] = {}  # (id(capability), name): served once
        self._aliases: dict[int, tuple[int, Any]] = {}  # of the reply being encoded
        self._args: tuple[Any, ...] = ()  # of the reply being decoded
        self._encoder = Encoder(self._alias, self._handle, plain=trusting)
        self._decoder: Decoder = Decoder(
            theirs=self._theirs,
            ours=self._ours,
            arg=self._arg,
            exc_class=lambda node: class_from(node, self),
            exception=lambda rest, depth: build_exception(rest, self, self._decoder.value, depth),
        )

    # -- encoding ---------------------------------------------------------------------------------
    def export(self, obj: object) -> int:
        key = id(obj)
        self.exports[key] = obj
        return key

    def encode(self, obj: Any, aliases: dict[int, tuple[int, Any]] | None = None) -> Any:
        """`obj` as a node (remote_codec.py): data by copy, anything else by handle.
        `aliases`: {id: (index, arg)} of the arguments a reply may name as ["g", index]."""
        saved, self._aliases = self._aliases, aliases or {}
        try:
            return self._encoder.node(obj)
        finally:
            self._aliases = saved

    def _alias(self, o: Any) -> list[Any] | None:
        hit = self._aliases.get(id(o))
        return ["g", hit[0]] if hit is not None and hit[1] is o else None

    def _handle(self, o: Any) -> Any:
        if isinstance(o, RemoteModule):
            o = o.__dict__["_remote"]
        if isinstance(o, Remote) and object.__getattribute__(o, "_ch") is self:
            return ["y", object.__getattribute__(o, "_id")]
        if isinstance(o, BaseException):
            return encode_exception(o, self, self._encoder.node)
        if isinstance(o, type) and issubclass(o, BaseException):
            return class_node(o, self)
        if not self.trusting:  # only a registered capability: never a frame, a function, ...
            o = served(o)
            kind = "function" if isinstance(o, Callback) else "object"
            return ["h", kind, self.export(o), type(o).__name__]
        kind = "function" if isinstance(o, types.FunctionType) else "object"
        kind = "module" if isinstance(o, types.ModuleType) else kind
        return ["h", kind, self.export(o), str(getattr(o, "__name__", type(o).__name__))]

    def decode(self, node: Any, args: tuple[Any, ...] = ()) -> Any:
        """A node from the other end as a value (RemoteError if it is not one of the table);
        `args`: the request's arguments, which ["g", index] names."""
        saved, self._args = self._args, args
        try:
            return self._decoder.decode(node)
        finally:
            self._args = saved

    def _ours(self, key: int) -> Any:
        if key not in self.exports:
            raise RemoteError("a reference to an object that was never handed over")
        return self.exports[key]

    def _arg(self, i: int) -> Any:
        if not 0 <= i < len(self._args):
            raise RemoteError("a reference to an argument that was not passed")
        return self._args[i]

    def _theirs(self, kind: str, key: int, name: str) -> Any:
        if key not in self.proxies:
            proxy: Any = (RemoteModule if kind == "module" else Remote)(self, key, name)
            if kind == "function" and self.trusting:  # a real function, so it binds as a method
                self.proxies[key] = lambda *a, **k: proxy(*a, **k)
            else:
                self.proxies[key] = proxy
        return self.proxies[key]

    # -- the conversation ------------------------------------------------------------------
    def _send(self, message: object) -> None:
        data = dump_message(message)
        self.sock.sendall(struct.pack("!Q", len(data)) + data)

    def _recv(self) -> list[Any]:
        """The next message, as plain JSON lists (nothing built yet). Its length is checked
        against the limit before a byte of it is read, and it is read into one buffer of
        that length: a peer that sends more cannot make this process hold more."""
        n = struct.unpack("!Q", self._exact(8))[0]
        if not self.trusting and n > self.limit:
            raise self._refuse(
                f"a reply of {_size(n)} from your code, over the limit of {_size(self.limit)}"
            )
        message = load_message(self._exact(n))
        if type(message) is not list or not message or message[0] not in ("R", "P"):
            raise RemoteError("a malformed message: no envelope")
        return message

    def _refuse(self, why: str) -> RemoteError:
        self.refused = self.refused or why
        return RemoteError(why)

    def _exact(self, n: int) -> bytes | bytearray:
        buf, got = bytearray(n), 0
        view = memoryview(buf)
        while got < n:
            part = self.sock.recv_into(view[got:], min(n - got, 1 << 20))
            if not part:
                raise ChildDied("the other process closed the connection")
            got += part
        return bytes(buf) if n < 1 << 16 else buf

    def request(self, op: str, *payload: Any) -> Any:
        """Ask the other end; serve its requests until our reply arrives."""
        if self.dead:
            raise ChildDied(self.dead)
        self.seq += 1
        mine = self.seq
        args = payload[1] if op == "call" else payload[2] if op == "special" else ()
        request = ["R", mine, op, self.encode(tuple(payload))]  # Unregistered: the check's own
        try:
            with self.guard():  # the other end's input drives what runs here: audited
                self._send(request)
                while True:
                    message = self._recv()
                    if message[0] == "R":
                        self._serve(message)
                        continue
                    return self._finish(message, mine, args, op, payload)
        except _Raised:
            raise
        except Exception as e:  # noqa: BLE001 - a dead peer, or a message we refuse: the conversation is over
            if isinstance(e, RemoteError) and not self.trusting:
                self._refuse(str(e))
            self.kill(f"{type(e).__name__}: {e}")
            raise ChildDied(self.dead) from None
        except BaseException:  # a time limit (or Ctrl-C) interrupted the conversation midway
            self.kill("stopped at a time limit")
            raise

    def _finish(
        self, message: list[Any], mine: int, args: Any, op: str, payload: tuple[Any, ...]
    ) -> Any:
        if len(message) != 5 or message[1] not in ("ok", "err") or message[2] != mine:
            raise RemoteError("a malformed or out-of-order reply")
        _tag, kind, _seq, value, back = message
        if op == "call":
            back = self.decode(back)
            if type(back) is not dict:
                raise RemoteError("a malformed message: arguments written back that are not a dict")
            _write_back(payload[1], payload[2], back)
        value = self.decode(value, args)
        if kind == "ok":
            return value
        if not isinstance(value, BaseException):
            raise RemoteError("a malformed message: an error that is not an exception")
        if self.on_error is not None:
            self.on_error(value)
        raise _Raised(value)

    def kill(self, why: str) -> None:
        self.dead = self.dead or why
        try:
            self.sock.close()
        finally:
            if self.on_dead:
                self.on_dead()

    def _serve(self, message: list[Any]) -> None:
        with self.guard():  # the other end's request drives what runs here: audited
            seq: Any = 0
            back: dict[int | str, Any] = {}
            aliases: dict[int, tuple[int, Any]] = {}
            reply: tuple[str, Any]
            try:
                if len(message) != 4 or type(message[1]) is not int or type(message[2]) is not str:
                    raise RemoteError("a malformed request")
                _tag, seq, op, payload = message
                payload = self.decode(payload)
                if type(payload) is not tuple or not payload and op not in self.helpers:
                    raise RemoteError("a malformed request")
                value = self.perform(op, payload)
                if op == "call":
                    back = _collect_back(payload[1], payload[2])
                    aliases = {
                        id(a): (i, a) for i, a in enumerate(payload[1]) if isinstance(a, MUTABLE)
                    }
                reply = ("ok", value)
            except BaseException as e:  # noqa: BLE001 - every failure goes back as the caller's exception
                if isinstance(e, KeyboardInterrupt) and not self.trusting:
                    raise
                reply = ("err", e)
            try:
                out = ["P", reply[0], seq, self.encode(reply[1], aliases), self.encode(back)]
                self._send(out)
                return
            except (OSError, ChildDied):
                raise
            except Exception as e:  # noqa: BLE001 - a result that cannot be sent (a cycle, a huge int)
                failed = TypeError(f"a value could not be sent back: {type(e).__name__}: {e}")
            self._send(["P", "err", seq, self.encode(failed), ["d", []]])

    def perform(self, op: str, payload: tuple[Any, ...]) -> Any:
        """The other end's request. An untrusting end's names one of our capabilities, and is
        checked against its surface before any attribute is looked up (remote_caps.py)."""
        if self.trusting and op in self.helpers:
            return self.helpers[op](*payload)
        obj = payload[0]
        if self.trusting:
            return _perform(op, obj, payload)
        surface = surface_of(obj)
        if surface is None:
            raise PermissionError(f"the grader serves nothing on a {type(obj).__name__}")
        name = payload[1] if op in _NAMED else _OPS.get(op)
        if op == "getattr" and type(name) is str and name in surface.methods:
            return self._methods.setdefault((id(obj), name), Method(obj, name))
        allowed = getattr(surface, _NAMED[op]) if op in _NAMED else surface.operations
        if type(name) is not str or name not in allowed or op == "special" and name not in SPECIAL:
            raise PermissionError(
                f"the grader does not serve {op} {str(name)[:60]!r} on a {type(obj).__name__}"
            )
        return _perform(op, obj, payload)


# the requests that name an attribute or operator, and the surface field that allows it
_NAMED = {"getattr": "attributes", "setattr": "settable", "special": "operations"}
_OPS = {"call": CALL, "asarray": ARRAY}  # the other requests, as the operation they are


def _perform(op: str, obj: Any, payload: tuple[Any, ...]) -> Any:
    if op == "getattr":
        return getattr(obj, payload[1])
    if op == "setattr":
        return setattr(obj, payload[1], payload[2])
    if op == "call":
        return obj(*payload[1], **payload[2])
    if op == "special":
        return OPERATORS[payload[1]](obj, *payload[2])
    if op == "asarray":
        return np.asarray(obj)
    raise PermissionError(f"unknown request {op!r}")


def _size(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n} bytes"


def serve(fd: int, helpers: dict[str, Callable[..., Any]]) -> None:
    """The child's whole life: stdin/stdout/stderr to /dev/null ($PAGEDSIM_CHILD_OUTPUT, for
    debugging, takes the output instead), then serve requests until the socket closes."""
    import os

    sock = socket.socket(fileno=fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    debug = os.environ.get("PAGEDSIM_CHILD_OUTPUT")
    out = os.open(debug, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if debug else null
    for std in (1, 2):
        os.dup2(out, std)
    ch = Channel(sock, trusting=True)
    ch.helpers.update(helpers)
    while True:
        try:
            message = ch._recv()
        except (ChildDied, OSError, RemoteError):
            os._exit(0)
        if message[0] == "R":
            ch._serve(message)


# imported from here by conform.py and course/isolation.py
__all__ = ["DEPTH", "ChildDied", "RemoteError", "ask"]
