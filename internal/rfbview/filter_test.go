package rfbview

import (
	"bytes"
	"errors"
	"testing"
)

func handshake() []byte {
	return append([]byte("RFB 003.008\n"), 1, 1)
}

// stream is a viewer's session: handshake, pixel format, encodings, an
// update request, then input (pointer, key, clipboard, resize, QEMU key)
// between two more update requests and a fence.
func stream() (all, want []byte) {
	var a, w bytes.Buffer
	both := func(b ...byte) { a.Write(b); w.Write(b) }
	both(handshake()...)
	both(append([]byte{msgSetPixelFormat}, make([]byte, 19)...)...)
	both(msgSetEncodings, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x21)
	both(msgFramebufferUpdateReq, 0, 0, 0, 0, 0, 5, 0, 4, 0)
	a.Write([]byte{msgPointerEvent, 1, 0, 10, 0, 20})
	a.Write([]byte{msgKeyEvent, 1, 0, 0, 0, 0, 0, 0x61})
	a.Write([]byte{msgClientCutText, 0, 0, 0, 0, 0, 0, 5})
	a.WriteString("hello")
	a.Write([]byte{msgSetDesktopSize, 0, 0, 10, 0, 10, 1, 0})
	a.Write(make([]byte, 16))
	a.Write([]byte{msgQEMU, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 0x1e})
	both(msgFramebufferUpdateReq, 1, 0, 0, 0, 0, 5, 0, 4, 0)
	both(msgClientFence, 0, 0, 0, 0, 0, 0, 0, 2, 'a', 'b')
	both(msgEnableContinuousUpd, 1, 0, 0, 0, 0, 5, 0, 4, 0)
	return a.Bytes(), w.Bytes()
}

// Whatever way the stream is split, only the viewer's messages reach the
// server, in order, and every input message is counted as dropped.
func TestFilterDropsInput(t *testing.T) {
	all, want := stream()
	for _, chunk := range []int{1, 2, 3, 7, 64, len(all)} {
		var out bytes.Buffer
		f := NewFilter(&out)
		for i := 0; i < len(all); i += chunk {
			end := min(i+chunk, len(all))
			if n, err := f.Write(all[i:end]); err != nil || n != end-i {
				t.Fatalf("chunk %d: write at %d: %d %v", chunk, i, n, err)
			}
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("chunk %d: passed\n%v\nwant\n%v", chunk, out.Bytes(), want)
		}
		if f.Dropped != 5 {
			t.Errorf("chunk %d: dropped %d messages, want 5", chunk, f.Dropped)
		}
	}
}

func TestFilterRefusesWhatItCannotParse(t *testing.T) {
	for name, b := range map[string][]byte{
		"version 3.3":     []byte("RFB 003.003\n"),
		"garbage version": []byte("GET / HTTP/1.1\r\n"),
		"vnc auth":        append([]byte("RFB 003.008\n"), 2),
		"unknown message": append(handshake(), 42),
		"qemu audio":      append(handshake(), msgQEMU, 1, 0, 0),
		"huge clipboard":  append(handshake(), msgClientCutText, 0, 0, 0, 0x7f, 0, 0, 0),
		"huge fence":      append(handshake(), msgClientFence, 0, 0, 0, 0, 0, 0, 0, 200),
	} {
		var out bytes.Buffer
		if _, err := NewFilter(&out).Write(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}
