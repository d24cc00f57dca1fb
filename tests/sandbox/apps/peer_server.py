"""A peer server for sandbox tests: HTTP on 127.0.0.1:<argv[1]>, answers 'peer <port>'. Stdlib only."""

import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

port = int(sys.argv[1])


class H(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = f"peer {port}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
HTTPServer(("127.0.0.1", port), H).serve_forever()
