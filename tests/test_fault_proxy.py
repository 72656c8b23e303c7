"""shared/fault_proxy.py on its own: each fault does to a real TCP link what its name says, and heals.
The upstream is a small echo server of the test's own (a request of b"big" gets 1,000 bytes back).  Waits
are bounded and poll real sockets; the one lower bound on time (latency) is what the fault guarantees."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from shared.fault_proxy import FaultProxy

BIG = b"x" * 1000


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            try:
                data = self.request.recv(4096)
            except OSError:
                return
            if not data:
                return
            self.request.sendall(BIG if data == b"big" else data)


@pytest.fixture
def proxy():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen = []
    link = FaultProxy("test->echo", server.server_address, seed=1, on_event=seen.append)
    link.start()
    link.seen = seen
    yield link
    link.stop()
    server.shutdown()
    server.server_close()


def connect(proxy, timeout=5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def ask(sock: socket.socket, data: bytes, want: int) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < want:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_a_healthy_link_passes_everything_both_ways(proxy):
    with connect(proxy) as sock:
        assert ask(sock, b"ping", 4) == b"ping"
        assert ask(sock, b"big", 1000) == BIG


def test_latency_delays_each_answer_by_at_least_the_latency_and_heals(proxy):
    proxy.set(latency=0.3)
    with connect(proxy) as sock:
        started = time.monotonic()
        assert ask(sock, b"slow", 4) == b"slow"
        assert time.monotonic() - started >= 0.6  # 0.3 s each way
    proxy.set()
    with connect(proxy) as sock:
        assert ask(sock, b"fast", 4) == b"fast"


def test_a_cut_reply_stops_after_its_bytes_and_the_connection_ends(proxy):
    proxy.set(cut_after=100)
    with connect(proxy) as sock:
        sock.sendall(b"big")
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
        assert got == BIG[:100]  # half an answer, then the end


def test_a_hung_link_accepts_and_never_answers(proxy):
    proxy.set(hang=True)
    with connect(proxy, timeout=0.5) as sock:  # accepted: the connect itself succeeds
        sock.sendall(b"anyone?")
        with pytest.raises(socket.timeout):
            sock.recv(4096)
        proxy.set()
        with pytest.raises(socket.timeout):  # what was sent while it hung is lost, not late
            sock.recv(4096)
    with connect(proxy) as sock:
        assert ask(sock, b"back", 4) == b"back"


def test_a_link_that_is_down_refuses_and_comes_back_on_the_same_port(proxy):
    port = proxy.port
    with connect(proxy) as open_one:
        assert ask(open_one, b"here", 4) == b"here"
        proxy.set(down=True)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            open_one.sendall(b"still there?")
            if not open_one.recv(4096):
                raise ConnectionResetError("closed")
    proxy.set()
    assert proxy.port == port
    with connect(proxy) as sock:
        assert ask(sock, b"up", 2) == b"up"


def test_reset_ends_the_open_connections_now(proxy):
    with connect(proxy) as sock:
        assert ask(sock, b"one", 3) == b"one"
        assert proxy.reset() == 2  # the client's side and the server's side of the one connection
        with pytest.raises(ConnectionResetError):
            if not sock.recv(4096):
                raise ConnectionResetError("closed")


def test_every_change_is_an_event_with_its_link_and_what_was_set(proxy):
    proxy.set(latency=0.1, jitter=0.05)
    proxy.reset()
    proxy.set()
    actions = [(e["link"], e["action"]) for e in proxy.seen]
    assert actions == [("test->echo", "start"), ("test->echo", "set"), ("test->echo", "reset"),
                       ("test->echo", "set")]
    assert proxy.seen[1]["latency"] == 0.1 and proxy.seen[1]["jitter"] == 0.05
    assert all(isinstance(e["at"], float) for e in proxy.seen)
    with pytest.raises(ValueError):
        proxy.set(latency=-1)
