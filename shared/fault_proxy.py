"""The fault proxy: one network link between a learner process and a server, made sick on demand.

Issue 40's workbench needs the network's faults where the kernel has no sch_netem (this machine, many WSL2
kernels): every learner connection to Redis or MariaDB goes through a FaultProxy on loopback, and the
nemesis sets what the link does -- the faults Toxiproxy names, in this kit's words:

    latency   each chunk waits `latency` s (+ up to `jitter` s, from the seeded random), in both directions
    cut       the reply stops after `cut_after` bytes and the connection ends: a reply cut in the middle
    hang      the link accepts and never answers: what is sent either way is lost while the hang lasts
    down      new connections are refused (the port closes) and open ones are reset
    reset()   every open connection is reset now (one action, not a state)

    proxy = FaultProxy("worker->redis", ("127.0.0.1", 6379), seed=7)
    port = proxy.start()                      # learner code connects to 127.0.0.1:port
    proxy.set(latency=0.2, jitter=0.05)       # from now on; set() with no arguments heals the link
    proxy.reset()
    proxy.stop()

Every change is an event (proxy.events, and on_event if given): the nemesis's own actions for the history.
Runs in a thread of its own with its own event loop; every method may be called from any thread.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Faults:
    latency: float = 0.0
    jitter: float = 0.0
    cut_after: int | None = None
    hang: bool = False
    down: bool = False


HEALTHY = Faults()
CHUNK = 65536


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a peer that vanished would, not a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
    writer.close()  # already closed by abort(); marks the writer closed too


class FaultProxy:
    def __init__(self, name: str, upstream: tuple[str, int], seed: int = 0, listen_port: int = 0,
                 on_event=None):
        self.name, self.upstream, self.port = name, upstream, listen_port
        self.faults = HEALTHY
        self.events: list[dict] = []
        self._on_event = on_event
        self._random = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._open: set[asyncio.StreamWriter] = set()

    # -- life

    def start(self) -> int:
        """Listen on loopback (the given port, else a free one); return the port."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._listen())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"fault-proxy {self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"fault proxy {self.name} did not start listening")
        self._record("start", port=self.port, upstream=f"{self.upstream[0]}:{self.upstream[1]}")
        return self.port

    def stop(self) -> None:
        if self._loop is None:
            return
        self._call(self._close_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None
        self._record("stop")

    # -- the nemesis's controls

    def set(self, **faults) -> Faults:
        """The link's faults from now on (unnamed ones healthy); set() heals it.  Returns what was set."""
        new = replace(HEALTHY, **faults)
        if new.latency < 0 or new.jitter < 0 or (new.cut_after is not None and new.cut_after < 0):
            raise ValueError(f"faults must not be negative: {new}")
        self._call(self._apply, new)
        self._record("set", **{k: v for k, v in asdict(new).items() if v != getattr(HEALTHY, k)})
        return new

    def reset(self) -> int:
        """Reset every open connection now; how many there were."""
        count = self._call(self._reset_all)
        self._record("reset", connections=count)
        return count

    # -- inside the proxy's loop

    def _call(self, function, *args):
        return asyncio.run_coroutine_threadsafe(self._run(function, *args), self._loop).result(10)

    @staticmethod
    async def _run(function, *args):
        result = function(*args)
        return await result if asyncio.iscoroutine(result) else result

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _apply(self, new: Faults) -> None:
        was, self.faults = self.faults, new
        if new.down and not was.down:
            self._server.close()
            await self._server.wait_closed()
            self._reset_all()
        elif was.down and not new.down:
            await self._listen()  # the same port again: clients keep their address

    def _reset_all(self) -> int:
        count = len(self._open)
        for writer in list(self._open):
            _reset(writer)
        self._open.clear()
        return count

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _serve(self, client_reader, client_writer) -> None:
        if self.faults.down:  # accepted by the kernel just before the link went down
            _reset(client_writer)
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(client_writer)  # the server itself is down: the client sees its connection reset
            return
        if self.faults.down:
            _reset(client_writer)
            _reset(server_writer)
            return
        self._open.update((client_writer, server_writer))
        try:
            await asyncio.gather(self._pump(client_reader, server_writer, client_writer, reply=False),
                                 self._pump(server_reader, client_writer, server_writer, reply=True),
                                 return_exceptions=True)
        finally:
            self._open.difference_update((client_writer, server_writer))
            client_writer.close()
            server_writer.close()

    async def _pump(self, reader, writer, other, reply: bool) -> None:
        """One direction of one connection, with the link's faults applied to each chunk as it passes."""
        sent = 0
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                faults = self.faults
                if faults.hang:  # accepted, never answered: what passes now is lost, as on a dead link
                    continue
                if faults.latency or faults.jitter:
                    await asyncio.sleep(faults.latency + self._random.uniform(0, faults.jitter))
                if reply and faults.cut_after is not None and sent + len(data) > faults.cut_after:
                    # The reply's first bytes arrive, then the connection ends: the client holds half an
                    # answer.  (An end, not a reset: a reset may make the kernel drop what already arrived.)
                    writer.write(data[:max(0, faults.cut_after - sent)])
                    await writer.drain()
                    self._record("cut", after=faults.cut_after)
                    writer.close()
                    _reset(other)
                    return
                writer.write(data)
                await writer.drain()
                sent += len(data)
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
        except (ConnectionError, OSError, RuntimeError):
            _reset(writer)
            _reset(other)

    def _record(self, action: str, **fields) -> None:
        event = {"at": time.time(), "link": self.name, "action": action, **fields}
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)
