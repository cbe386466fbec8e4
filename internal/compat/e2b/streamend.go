package e2b

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// A sandbox that goes away while one of its streams is open (killed,
// timed out) cuts the agent's connection in the middle of the stream. Passed
// on as a cut, the SDKs see "[unknown] terminated" and, as E2B's edge does
// not answer that way, ask the sandbox's /health whether it is gone. E2B
// ends such a stream with Connect's end of stream carrying code
// "unavailable", which the SDKs turn into the TimeoutError they document
// for a sandbox killed or timed out during a call. endStream does the same
// for a Connect server stream whose upstream breaks between two messages.
//
// A data-plane request for a sandbox that does not exist (any more)
// answers 502, as E2B's edge does: the SDKs read 502 as "sandbox not
// running" (TimeoutError, or SandboxNotFoundError when a command starts).

// connectStream reports whether resp is a Connect streaming response.
func connectStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+")
}

// endStream passes a Connect stream through, following its envelopes
// (flags byte, 4-byte big-endian length, message) so that it knows where
// messages end. When upstream fails at a message boundary before the
// end-of-stream message, it ends the stream with one of its own carrying
// code "unavailable" and msg. A break inside a message cannot be mended:
// that error passes on.
type endStream struct {
	io.ReadCloser
	msg string

	hdr     [5]byte
	hdrLen  int    // bytes of the current envelope header seen
	left    uint32 // bytes of the current message still to come
	ended   bool   // the end-of-stream message passed
	tail    []byte // the synthesized end of stream, being read out
	tailing bool
}

const connectEndStreamFlag = 0x02

func (e *endStream) Read(p []byte) (int, error) {
	if e.tailing {
		if len(e.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, e.tail)
		e.tail = e.tail[n:]
		return n, nil
	}
	n, err := e.ReadCloser.Read(p)
	e.track(p[:n])
	if err == nil || e.ended || e.hdrLen != 0 || e.left != 0 {
		return n, err
	}
	// Upstream ended or broke between two messages without the end of
	// stream: say why, as Connect does.
	e.tail = connectEndOfStream("unavailable", e.msg)
	e.tailing = true
	return n, nil
}

// track follows the envelopes of b.
func (e *endStream) track(b []byte) {
	for len(b) > 0 {
		if e.left > 0 {
			k := min(uint32(len(b)), e.left)
			e.left -= k
			b = b[k:]
			continue
		}
		k := copy(e.hdr[e.hdrLen:], b)
		e.hdrLen += k
		b = b[k:]
		if e.hdrLen < len(e.hdr) {
			return
		}
		e.hdrLen = 0
		e.left = binary.BigEndian.Uint32(e.hdr[1:])
		if e.hdr[0]&connectEndStreamFlag != 0 {
			e.ended = true
		}
	}
}

// connectEndOfStream is an enveloped Connect end-of-stream message (always
// JSON, whatever the stream's codec) with an error.
func connectEndOfStream(code, msg string) []byte {
	type cerr struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Error cerr `json:"error"`
	}{cerr{code, msg}})
	out := make([]byte, 5, 5+len(body))
	out[0] = connectEndStreamFlag
	binary.BigEndian.PutUint32(out[1:], uint32(len(body)))
	return append(out, body...)
}
