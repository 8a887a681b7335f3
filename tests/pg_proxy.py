"""A TCP proxy in front of the test PostgreSQL that can fail the way networks and servers do:
``freeze()`` (a stopped server, a network that drops everything: bytes are held, nothing is
answered, new connections hang), ``cut_after_commit()`` (the server commits an append, the
connection is lost before its answer reaches the client: an ambiguous commit) and
``freeze_after_commit()`` (the same, but the server then stays unreachable).

Only 127.0.0.1. It forwards bytes; all it reads of the protocol is the server's answer to an
INSERT, then the ``COMMIT`` the client sends after it (psycopg sends that statement's
text): the commit of an append, in the tests that use it.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit, urlunsplit

COMMIT = b"COMMIT\x00"
#: The server's answer to an INSERT (its command tag): what the COMMIT of an append follows.
#: (The client's statement text is no mark: psycopg sends a statement it has prepared by
#: name only.)
INSERTED = b"INSERT 0 "


class PgProxy:
    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        netloc = f"{parts.username}@127.0.0.1:{self.port}" if parts.username else \
            f"127.0.0.1:{self.port}"
        #: The DSN through this proxy (the query string, e.g. the test's schema, kept).
        self.dsn = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        self._running = threading.Event()
        self._open = threading.Event()  # cleared while frozen
        self._open.set()
        self._lock = threading.Lock()
        self._after_commit = ""  # "", "cut" or "freeze"
        self.commits_cut = 0
        self._sockets: list[socket.socket] = []
        self._running.set()
        threading.Thread(target=self._accept, daemon=True).start()

    # -- faults ------------------------------------------------------------------------------

    def freeze(self) -> None:
        """Stop forwarding anything, in either direction, on every connection."""
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    def cut_after_commit(self) -> None:
        """The next append's COMMIT reaches the server; its answer never reaches the client,
        whose connection is closed instead."""
        with self._lock:
            self._after_commit = "cut"

    def freeze_after_commit(self) -> None:
        """The next append's COMMIT reaches the server; then the proxy freezes."""
        with self._lock:
            self._after_commit = "freeze"

    @contextmanager
    def frozen(self) -> Iterator[None]:
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    def close(self) -> None:
        self._running.clear()
        self._open.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    # -- forwarding --------------------------------------------------------------------------

    def _accept(self) -> None:
        while self._running.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._open.wait()
        try:
            server = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            _close(client)
            return
        server.settimeout(None)
        with self._lock:
            self._sockets += [client, server]
        state = {"appending": False, "committing": False}
        threading.Thread(target=self._pump, args=(client, server, state, True),
                         daemon=True).start()
        self._pump(server, client, state, False)

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict[str, bool],
              from_client: bool) -> None:
        try:
            while self._running.is_set():
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready:
                    continue
                self._open.wait()
                data = src.recv(65536)
                if not data:
                    break
                if not from_client and INSERTED in data:
                    state["appending"] = True
                if from_client and COMMIT in data and state["appending"]:
                    state["appending"] = False
                    with self._lock:
                        mode, self._after_commit = self._after_commit, ""
                    if mode == "freeze":  # frozen first: the server's answer is held
                        self.freeze()
                        dst.sendall(data)
                        continue
                    state["committing"] = mode == "cut"
                elif not from_client and state["committing"]:
                    self.commits_cut += 1
                    break  # the server's answer to the COMMIT: dropped, connection cut
                dst.sendall(data)
        except (OSError, ValueError):  # the other direction closed the sockets first
            pass
        finally:
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
