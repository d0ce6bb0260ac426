"""A real HTTP server on 127.0.0.1 for download tests: Range, dropped connections, auth."""
from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ArchiveServer:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[dict] = []
        self.drop_after: int | None = None  # bytes sent before cutting the first body short
        self.drops_left = 0
        self.ignore_range = False
        self.token: str | None = None  # required "Authorization: Bearer <token>"
        self.fail_5xx = 0  # answer this many requests with 503 first
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append({"path": self.path, "headers": dict(self.headers)})
                if server.fail_5xx:
                    server.fail_5xx -= 1
                    return self._plain(503, b"busy")
                if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._plain(401, b"login first")
                data = server.files.get(self.path.split("?")[0])
                if data is None:
                    return self._plain(404, b"no such file")
                start, status = 0, 200
                m = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
                if m and not server.ignore_range:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                body = data[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if server.drops_left and server.drop_after is not None:
                    server.drops_left -= 1
                    self.wfile.write(body[:server.drop_after])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

            def _plain(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
