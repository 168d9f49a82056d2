"""A local HTTP server for the tests: a folder, or a handler class, served on a free port of
127.0.0.1 (or another loopback address) from a daemon thread, until stop() or the end of a
`with` block (the server shut down and its socket closed).

    with httpserve.Server(folder) as served:   # or Server(HandlerClass), Server(partial(...))
        urllib.request.urlopen(f"{served.url}/file")

Servers that behave specially (failing, stalling, counting requests, serving stale pages) keep
their own handler class and start and stop through this one. tests/test_test_helpers.py fails
when a module constructs an http.server server of its own again.
"""

from __future__ import annotations

import functools
import http.server
import os
import socketserver
import ssl
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

Handler = Callable[..., socketserver.BaseRequestHandler]


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """A folder's files, without a log line on stderr for each request."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server:
    """what: a folder (its files, quietly) or a handler class (or a partial of one).
    host: where it listens (a port of its own is picked). tls: a server-side SSLContext (the
    socket is wrapped: https). server_class: an http.server server class (a subclass of
    ThreadingHTTPServer carrying state for its handler). daemon_threads: request threads do not
    hold up stop() (False: stop() waits for the requests in flight, as socketserver does).

    .httpd the server, .port, .url (http[s]://host:port, no trailing slash)."""

    def __init__(
        self,
        what: str | os.PathLike[str] | Handler,
        *,
        host: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
        server_class: type[http.server.HTTPServer] = http.server.ThreadingHTTPServer,
        daemon_threads: bool = True,
    ) -> None:
        if isinstance(what, str | os.PathLike):
            handler: Any = functools.partial(QuietFiles, directory=os.fspath(what))
        else:
            handler = what
        self.httpd = server_class((host, 0), handler)
        if daemon_threads:
            self.httpd.daemon_threads = True  # type: ignore[attr-defined]
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.host = host
        self.port: int = self.httpd.server_address[1]
        self.url = f"{'https' if tls is not None else 'http'}://{host}:{self.port}"
        self._stopped = False
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Shut the server down and close its socket (again: nothing)."""
        if self._stopped:
            return
        self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
