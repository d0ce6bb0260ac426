"""Real HTTP servers on 127.0.0.1 for the tests, one module: each runs in a thread of the test's
process and is used as `with XServer(...) as s:`.

`ArchiveServer`, for download tests: Range, dropped connections, auth, redirects, validators
(ETag, Last-Modified) and HEAD; and hostile ones: a server that accepts and never answers, one
that drips a byte at a time, an endless chunked body, a Content-Length that lies, gzip encoding
asked for or not, a slow body (to make concurrent clients overlap).
`IndexServer`, a package index for the PyPI source: project pages as PEP 691 JSON or PEP 503
HTML (each with its content type), files, HTTP Basic credentials.
`DirectoryServer`, Python's own file server over a directory (a mirror of NVIDIA's tree).
Each records what it was asked."""
from __future__ import annotations

import base64
import gzip
import hashlib
import re
import threading
import time
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Quiet:
    """Handler mixin: HTTP/1.1, and no log lines on stderr (where the CLI's output is read)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


class _Background:
    """A ThreadingHTTPServer on 127.0.0.1 served from a daemon thread between __enter__ and
    __exit__; a client hanging up early is recorded in `errors`, not printed."""

    def _serve(self, handler, port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.errors: list = []
        self.httpd.handle_error = lambda request, address: self.errors.append(address)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class ArchiveServer(_Background):
    def __init__(self, port: int = 0):
        self.files: dict[str, bytes] = {}
        self.requests: list[dict] = []
        self.drop_after: int | None = None  # bytes sent before cutting the first body short
        self.drops_left = 0
        self.ignore_range = False
        self.ignore_if_range = False  # honour Range but not If-Range, as some proxies do
        self.wrong_range = False  # answer a Range with 206 for another offset than asked
        self.unknown_total = False  # a 206 says `bytes S-E/*`, no Content-Length, then closes
        self.token: str | None = None  # required "Authorization: Bearer <token>"
        self.fail_5xx = 0  # answer this many requests with 503 first
        self.redirects: dict[str, str] = {}  # path -> Location (absolute or relative)
        self.validators = True  # send ETag and Last-Modified
        self.etag = True  # …the ETag among them
        self.last_modified = "Mon, 01 Jan 2024 00:00:00 GMT"
        self.hang: set[str] = set()  # paths answered with nothing, the connection held open
        self.drip: dict[str, float] = {}  # path -> seconds between single bytes of the body
        self.endless: set[str] = set()  # paths answered with a chunked body without end
        self.endless_cap = 256 << 20  # …that stops here, so a test of the old code ends
        self.claim_length: dict[str, int] = {}  # path -> the Content-Length sent instead
        self.second_length: dict[str, int] = {}  # path -> a second Content-Length sent too
        self.gzip: str | None = None  # "asked": gzip when Accept-Encoding has it; "always";
        # "transfer": a gzip transfer coding under chunked framing, whatever was asked
        self.throttle: dict[str, float] = {}  # path -> seconds its body takes, in 50 pieces
        self.hold_after: dict[str, int] = {}  # path -> bytes sent before the body stalls…
        self.holds_left = 0  # …this many times (then it is served whole)
        self.sent: dict[str, int] = {}  # body bytes sent per path
        self.released = threading.Event()  # ends every held connection
        server = self

        class Handler(_Quiet, BaseHTTPRequestHandler):
            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body: bool):
                server.requests.append({"method": self.command, "path": self.path,
                                        "host": self.headers.get("Host"),
                                        "headers": dict(self.headers)})
                path = self.path.split("?")[0]
                if path in server.hang:
                    server.released.wait(120)
                    self.close_connection = True
                    return
                if path in server.endless and body:
                    return self._endless(path)
                if path in server.redirects:
                    self.send_response(302)
                    self.send_header("Location", server.redirects[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if server.fail_5xx:
                    server.fail_5xx -= 1
                    return self._plain(503, b"busy")
                if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._plain(401, b"login first")
                data = server.files.get(path)
                if data is None:
                    return self._plain(404, b"no such file")
                start, status = 0, 200
                m = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
                if_range = self.headers.get("If-Range")
                if if_range is not None and not server.ignore_if_range and not (
                        server.validators and if_range in (
                        f'"{hashlib.sha256(data).hexdigest()[:16]}"' if server.etag else None,
                        server.last_modified)):
                    m = None  # the file changed since that validator: all of it (RFC 9110)
                if m and not server.ignore_range and body:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        if server.validators:  # as Apache's: the file's, as on a 200
                            if server.etag:
                                self.send_header(
                                    "ETag", f'"{hashlib.sha256(data).hexdigest()[:16]}"')
                            self.send_header("Last-Modified", server.last_modified)
                        self.end_headers()
                        return
                    status = 206
                    if server.wrong_range:
                        start = max(0, start - 100)
                payload = data[start:]
                if server.gzip == "transfer":
                    return self._transfer_gzip(status, payload, body)
                encoded = server.gzip == "always" or (
                    server.gzip == "asked" and "gzip" in self.headers.get("Accept-Encoding", ""))
                if encoded:
                    payload = gzip.compress(payload)
                self.send_response(status)
                if encoded:
                    self.send_header("Content-Encoding", "gzip")
                if status == 206 and server.unknown_total:  # the body ends when the
                    self.send_header("Connection", "close")  # connection does
                    self.close_connection = True
                else:
                    self.send_header("Content-Length",
                                     str(server.claim_length.get(path, len(payload))))
                    if path in server.second_length:
                        self.send_header("Content-Length", str(server.second_length[path]))
                if server.validators:
                    if server.etag:
                        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()[:16]}"')
                    self.send_header("Last-Modified", server.last_modified)
                if status == 206:
                    total = "*" if server.unknown_total else len(data)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{total}")
                self.end_headers()
                if not body:
                    return
                if server.drops_left and server.drop_after is not None:
                    server.drops_left -= 1
                    self.wfile.write(payload[:server.drop_after])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(path, payload)

            def _send(self, path, payload):
                if path in server.hold_after and server.holds_left:
                    server.holds_left -= 1
                    try:
                        self.wfile.write(payload[:server.hold_after[path]])
                        self.wfile.flush()
                    except OSError:
                        pass
                    server.released.wait(120)
                    self.close_connection = True
                    return
                try:
                    if path in server.drip:
                        for i in range(len(payload)):
                            if server.released.is_set():
                                return
                            self.wfile.write(payload[i:i + 1])
                            self.wfile.flush()
                            server.sent[path] = server.sent.get(path, 0) + 1
                            time.sleep(server.drip[path])
                        return
                    seconds = server.throttle.get(path, 0.0)
                    pieces = 50 if seconds else 1
                    step = max(1, -(-len(payload) // pieces))
                    for i in range(0, len(payload), step):
                        if seconds:
                            time.sleep(seconds / pieces)
                        self.wfile.write(payload[i:i + step])
                        server.sent[path] = server.sent.get(path, 0) + len(payload[i:i + step])
                        if seconds:
                            self.wfile.flush()
                except OSError:  # the client hung up: what a refusing client does
                    self.close_connection = True

            def _transfer_gzip(self, status, payload, body):
                packed = gzip.compress(payload)
                self.send_response(status)
                self.send_header("Transfer-Encoding", "gzip, chunked")
                self.end_headers()
                if body:
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed))
                self.close_connection = True

            def _endless(self, path):
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                piece = b"\0" * (64 << 10)
                try:
                    while server.sent.get(path, 0) < server.endless_cap:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        server.sent[path] = server.sent.get(path, 0) + len(piece)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                self.close_connection = True

            def _plain(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        # a client that hangs up early (as a failing download does) is not the server's error
        self._serve(Handler, port)

    def file_requests(self, suffix: str = ".tgz") -> list[dict]:
        return [r for r in self.requests if r["path"].split("?")[0].endswith(suffix)]

    def __exit__(self, *exc):
        self.released.set()  # ends every held connection first
        super().__exit__(*exc)


class IndexServer(_Background):
    def __init__(self):
        self.routes: dict[str, tuple[str, bytes]] = {}  # path -> (content type, body)
        self.requests: list[dict] = []  # path, Accept, Authorization of each
        self.basic: tuple[str, str] | None = None  # required user and password
        server = self

        class Handler(_Quiet, BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                server.requests.append({"path": path, "accept": self.headers.get("Accept", ""),
                                        "authorization": self.headers.get("Authorization")})
                if server.basic is not None:
                    want = "Basic " + base64.b64encode(":".join(server.basic).encode()).decode()
                    if self.headers.get("Authorization") != want:
                        return self._send(401, "text/plain", b"login first")
                if path not in server.routes:
                    return self._send(404, "text/plain", b"no such page")
                kind, body = server.routes[path]
                self._send(200, kind, body)

            def _send(self, code, kind, body):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._serve(Handler)

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]


class DirectoryServer(_Background):
    """Python's own file server (with its directory index) over `root`; `log` holds the path
    and the Range header of every GET."""

    def __init__(self, root: Path):
        self.log: list[tuple[str, str | None]] = []
        log = self.log

        class Handler(_Quiet, SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # SimpleHTTPRequestHandler's own

            def do_GET(self):
                log.append((self.path, self.headers.get("Range")))
                super().do_GET()

        self._serve(partial(Handler, directory=str(root)))
        self.url = f"{self.base}/"

    def paths(self) -> list[str]:
        return [p for p, _ in self.log]
