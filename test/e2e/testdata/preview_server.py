"""A tiny server for preview-URL tests, standard library only.

GET /ws upgrades to a websocket that echoes text messages as "echo: <msg>".
GET /setcookie sets cookies: one of its own, one for the parent domain of
the host it was reached as, and one named like the daemon's preview cookie.
Any other GET answers with the path and the request headers, so the test
can check what reached the sandbox.
"""
import base64
import hashlib
import http.server
import socketserver
import struct
import sys

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_frame(sock):
    b1, b2 = recv_exact(sock, 2)
    opcode, masked, length = b1 & 0x0F, b2 & 0x80, b2 & 0x7F
    if length == 126:
        length = struct.unpack(">H", recv_exact(sock, 2))[0]
    elif length == 127:
        length = struct.unpack(">Q", recv_exact(sock, 8))[0]
    mask = recv_exact(sock, 4) if masked else b"\0\0\0\0"
    payload = bytes(c ^ mask[i % 4] for i, c in enumerate(recv_exact(sock, length)))
    return opcode, payload


def send_frame(sock, opcode, payload):
    header = bytes([0x80 | opcode])
    if len(payload) < 126:
        header += bytes([len(payload)])
    elif len(payload) < 65536:
        header += bytes([126]) + struct.pack(">H", len(payload))
    else:
        header += bytes([127]) + struct.pack(">Q", len(payload))
    sock.sendall(header + payload)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/ws"):
            return self.websocket()
        cookies = []
        if self.path.startswith("/setcookie"):
            host = self.headers.get("X-Forwarded-Host", "").split(":")[0]
            parent = host.split(".", 1)[1] if "." in host else "localhost"
            cookies = ["sba=secret-a; Path=/", "tossed=1; Domain=%s; Path=/" % parent,
                       "agentbox_preview=forged; Path=/"]
        body = "path=%s\n" % self.path
        for k, v in self.headers.items():
            body += "%s: %s\n" % (k.lower(), v)
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for c in cookies:
            self.send_header("Set-Cookie", c)
        self.end_headers()
        self.wfile.write(data)

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        sock = self.connection
        try:
            while True:
                opcode, payload = read_frame(sock)
                if opcode == 8:
                    send_frame(sock, 8, payload[:2])
                    return
                if opcode == 9:
                    send_frame(sock, 10, payload)
                elif opcode in (1, 2):
                    send_frame(sock, 1, b"echo: " + payload)
        except ConnectionError:
            return

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
