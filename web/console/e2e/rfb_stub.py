# A minimal RFB (VNC) server for TestConsole: TestConsole's sandboxes are
# host sandboxes, which have no desktop (the desktop template's x11vnc), so
# this stands in for x11vnc on the ports the daemon bridges (5910
# interactive, 5911 view), to show the console's embedded noVNC view
# through the daemon's real link, page, WebSocket and view filter.
# RFB 3.8, security None, raw encoding, a still test picture; it answers
# every full update request and ignores input. Stdlib only. It stops by
# itself after STOP_AFTER seconds.
import socket
import struct
import threading
import time

W, H = 640, 400
STOP_AFTER = 240
# Colour bands and a light box, so the screen is not one colour.
BANDS = [(0x2b, 0x6c, 0xb0), (0x3a, 0x9d, 0x5d), (0xd9, 0x8c, 0x1f), (0xb0, 0x3a, 0x48)]


def colour(x, y):
    if 200 <= x < 440 and 140 <= y < 260:
        return (0xee, 0xee, 0xee)
    return BANDS[(x * len(BANDS)) // W]


def recv(c, n):
    b = b''
    while len(b) < n:
        part = c.recv(n - len(b))
        if not part:
            raise EOFError
        b += part
    return b


def picture(fmt):
    # fmt: (big_endian, red_shift, green_shift, blue_shift) of a 32-bit
    # true-colour format. Rows repeat: two kinds, each packed once.
    # The unused byte is set (255): noVNC 1.3's raw decoder makes only the
    # first chunk of a rectangle opaque and leaves the rest's alpha as sent.
    big, rs, gs, bs = fmt
    pack = struct.Struct('>I' if big else '<I').pack
    pad = 0xffffffff & ~(255 << rs | 255 << gs | 255 << bs)

    def row(y):
        return b''.join(pack(pad | r << rs | g << gs | b << bs) for (r, g, b) in (colour(x, y) for x in range(W)))
    plain, boxed = row(0), row(H // 2)
    return b''.join(boxed if 140 <= y < 260 else plain for y in range(H))


def serve(c):
    try:
        c.sendall(b'RFB 003.008\n')
        recv(c, 12)
        c.sendall(b'\x01\x01')  # one security type: None
        recv(c, 1)
        c.sendall(struct.pack('>I', 0))
        recv(c, 1)  # ClientInit
        fmt = (False, 16, 8, 0)
        pf = struct.pack('>BBBBHHHBBB3x', 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
        name = b'agentbox test screen'
        c.sendall(struct.pack('>HH', W, H) + pf + struct.pack('>I', len(name)) + name)
        pixels = picture(fmt)
        while True:
            t = recv(c, 1)[0]
            if t == 0:  # SetPixelFormat
                m = recv(c, 19)
                bpp, _, big, _, _, _, _, rs, gs, bs = struct.unpack('>BBBBHHHBBB', m[3:16])
                if bpp == 32:
                    fmt = (bool(big), rs, gs, bs)
                    pixels = picture(fmt)
            elif t == 2:  # SetEncodings
                n = struct.unpack('>xH', recv(c, 3))[0]
                recv(c, 4 * n)
            elif t == 3:  # FramebufferUpdateRequest
                incremental = recv(c, 9)[0]
                if not incremental:
                    c.sendall(struct.pack('>BxHHHHHi', 0, 1, 0, 0, W, H, 0) + pixels)
            elif t == 4:
                recv(c, 7)
            elif t == 5:
                recv(c, 5)
            elif t == 6:
                n = struct.unpack('>3xI', recv(c, 7))[0]
                recv(c, n)
            else:
                return
    except (EOFError, OSError):
        pass
    finally:
        c.close()


def listen(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen(8)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


for p in (5910, 5911):
    threading.Thread(target=listen, args=(p,), daemon=True).start()
time.sleep(STOP_AFTER)
