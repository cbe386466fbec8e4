// Package rfbview enforces view-only on the client side of an RFB (VNC)
// connection: a Filter sits between a viewer and a VNC server and passes on
// only what a viewer needs to watch (the handshake, pixel format,
// encodings, update requests, fences), dropping every input message (keys,
// pointer, clipboard, desktop resizes). A stream it cannot parse ends the
// connection: what is not understood is never passed on.
//
// The desktop template's view-only VNC server (x11vnc -viewonly) ignores
// input too; the filter makes view-only hold in the daemon whatever the
// sandbox runs behind the port.
package rfbview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// RFB client-to-server message types (RFC 6143 section 7.5 and the
// community extensions noVNC sends).
const (
	msgSetPixelFormat       = 0
	msgSetEncodings         = 2
	msgFramebufferUpdateReq = 3
	msgKeyEvent             = 4
	msgPointerEvent         = 5
	msgClientCutText        = 6
	msgEnableContinuousUpd  = 150
	msgClientFence          = 248
	msgXvp                  = 250
	msgSetDesktopSize       = 251
	msgQEMU                 = 255
)

// maxCutText bounds a clipboard message the filter skips over.
const maxCutText = 16 << 20

// maxPending bounds what the filter holds while a message is incomplete.
const maxPending = 64 << 10

// Filter is an io.Writer for the client-to-server byte stream of one RFB
// connection (protocol 3.7 or 3.8, security type None). Messages a viewer
// needs are written to the server; input messages are dropped and
// counted.
type Filter struct {
	w       io.Writer
	state   int
	buf     []byte
	skip    int // bytes of a dropped clipboard message still to come
	Dropped int // input messages dropped so far
}

const (
	stateVersion = iota
	stateSecurity
	stateClientInit
	stateMessages
)

// ErrProtocol is returned for a stream the filter does not accept.
var ErrProtocol = errors.New("rfbview: unexpected RFB client message")

// NewFilter returns a Filter writing to the server w.
func NewFilter(w io.Writer) *Filter { return &Filter{w: w} }

// Write parses p (any split of the stream) and writes the allowed complete
// messages to the server. After an error the connection must be closed.
func (f *Filter) Write(p []byte) (int, error) {
	n := len(p)
	if f.skip > 0 {
		k := min(f.skip, len(p))
		f.skip -= k
		p = p[k:]
	}
	f.buf = append(f.buf, p...)
	for {
		size, pass, err := f.next()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			break // incomplete
		}
		if pass {
			if _, err := f.w.Write(f.buf[:size]); err != nil {
				return 0, err
			}
		}
		f.buf = f.buf[size:]
		if f.skip > 0 {
			k := min(f.skip, len(f.buf))
			f.skip -= k
			f.buf = f.buf[k:]
		}
	}
	if len(f.buf) > maxPending {
		return 0, fmt.Errorf("%w: a message of over %d bytes", ErrProtocol, maxPending)
	}
	// Keep the remainder in a buffer of its own (not aliasing p).
	f.buf = append([]byte(nil), f.buf...)
	return n, nil
}

// next looks at the buffered stream: the size of the first complete
// message (0 when more bytes are needed) and whether it passes.
func (f *Filter) next() (size int, pass bool, err error) {
	b := f.buf
	switch f.state {
	case stateVersion:
		if len(b) < 12 {
			return 0, false, nil
		}
		v := string(b[:12])
		if v != "RFB 003.008\n" && v != "RFB 003.007\n" {
			return 0, false, fmt.Errorf("%w: protocol version %q (3.7 or 3.8 only)", ErrProtocol, v)
		}
		f.state = stateSecurity
		return 12, true, nil
	case stateSecurity:
		if len(b) < 1 {
			return 0, false, nil
		}
		if b[0] != 1 {
			return 0, false, fmt.Errorf("%w: security type %d (None only)", ErrProtocol, b[0])
		}
		f.state = stateClientInit
		return 1, true, nil
	case stateClientInit:
		if len(b) < 1 {
			return 0, false, nil
		}
		f.state = stateMessages
		return 1, true, nil
	}
	if len(b) < 1 {
		return 0, false, nil
	}
	need := func(n int) int {
		if len(b) < n {
			return 0
		}
		return n
	}
	switch b[0] {
	case msgSetPixelFormat:
		return need(20), true, nil
	case msgSetEncodings:
		if len(b) < 4 {
			return 0, false, nil
		}
		return need(4 + 4*int(binary.BigEndian.Uint16(b[2:4]))), true, nil
	case msgFramebufferUpdateReq, msgEnableContinuousUpd:
		return need(10), true, nil
	case msgClientFence:
		if len(b) < 9 {
			return 0, false, nil
		}
		if b[8] > 64 {
			return 0, false, fmt.Errorf("%w: fence payload of %d bytes", ErrProtocol, b[8])
		}
		return need(9 + int(b[8])), true, nil
	case msgKeyEvent:
		return f.drop(need(8))
	case msgPointerEvent:
		return f.drop(need(6))
	case msgXvp:
		return f.drop(need(4))
	case msgSetDesktopSize:
		if len(b) < 8 {
			return 0, false, nil
		}
		return f.drop(need(8 + 16*int(b[6])))
	case msgClientCutText:
		if len(b) < 8 {
			return 0, false, nil
		}
		// A negative length is the extended clipboard's format.
		l := int64(int32(binary.BigEndian.Uint32(b[4:8])))
		if l < 0 {
			l = -l
		}
		if l > maxCutText {
			return 0, false, fmt.Errorf("%w: clipboard message of %d bytes", ErrProtocol, l)
		}
		// Skip the text as it streams by, without buffering it.
		f.skip = int(l)
		f.Dropped++
		return 8, false, nil
	case msgQEMU:
		if len(b) < 2 {
			return 0, false, nil
		}
		if b[1] == 0 { // extended key event
			return f.drop(need(12))
		}
	}
	return 0, false, fmt.Errorf("%w: message type %d", ErrProtocol, b[0])
}

func (f *Filter) drop(size int) (int, bool, error) {
	if size > 0 {
		f.Dropped++
	}
	return size, false, nil
}
