// Package httpbody holds helpers for HTTP bodies that a daemon passes on
// to another server (a sandbox's agent, another replica), or reads back
// from another replica (Answer).
package httpbody

import "io"

// EndAtLength returns body, which declares length bytes, as a reader that
// reads the body's EOF as soon as length bytes have come. A reverse
// proxy's transport stops reading at Content-Length without asking for
// more, but the incoming server's body timeout (BODY_TIMEOUT) stays armed
// on the caller's connection until the EOF is read, and would cut a later
// request of the same keep-alive connection in the middle of its stream.
func EndAtLength(body io.ReadCloser, length int64) io.ReadCloser {
	return &eofBody{ReadCloser: body, left: length}
}

type eofBody struct {
	io.ReadCloser
	left int64
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if err == nil && b.left <= 0 {
		var one [1]byte
		if m, err2 := b.ReadCloser.Read(one[:]); m == 0 && err2 != nil {
			err = err2
		}
	}
	return n, err
}
