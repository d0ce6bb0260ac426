"""A real package index on 127.0.0.1 for the PyPI source's tests: project pages as PEP 691 JSON
or PEP 503 HTML (each with its content type), files, HTTP Basic credentials, and a record of
every request (path, Accept, Authorization)."""
from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class IndexServer:
    def __init__(self):
        self.routes: dict[str, tuple[str, bytes]] = {}  # path -> (content type, body)
        self.requests: list[dict] = []
        self.basic: tuple[str, str] | None = None  # required user and password
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

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

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.handle_error = lambda request, address: None
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
