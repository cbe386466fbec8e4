package e2b

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// brokenBody yields data in small pieces, then err.
type brokenBody struct {
	data []byte
	err  error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, b.err
	}
	n := copy(p[:min(len(p), 3)], b.data)
	b.data = b.data[n:]
	return n, nil
}
func (b *brokenBody) Close() error { return nil }

func envelope(flags byte, msg string) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// TestEndStream: a Connect stream cut between two messages ends with an
// "unavailable" end of stream; one cut inside a message, or one that
// already ended, passes as it came.
func TestEndStream(t *testing.T) {
	cut := errors.New("unexpected EOF")
	msgs := append(envelope(0, `{"event":1}`), envelope(0, `{"event":2}`)...)
	got, err := io.ReadAll(&endStream{ReadCloser: &brokenBody{data: bytes.Clone(msgs), err: cut}, msg: "gone"})
	if err != nil {
		t.Fatalf("cut at a boundary: %v", err)
	}
	want := append(bytes.Clone(msgs), envelope(connectEndStreamFlag, `{"error":{"code":"unavailable","message":"gone"}}`)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("cut at a boundary: got %q, want %q", got, want)
	}

	_, err = io.ReadAll(&endStream{ReadCloser: &brokenBody{data: msgs[:len(msgs)-4], err: cut}, msg: "gone"})
	if !errors.Is(err, cut) {
		t.Fatalf("cut inside a message: err %v, want the cut", err)
	}

	ended := append(bytes.Clone(msgs), envelope(connectEndStreamFlag, `{}`)...)
	got, err = io.ReadAll(&endStream{ReadCloser: &brokenBody{data: bytes.Clone(ended), err: io.EOF}, msg: "gone"})
	if err != nil || !bytes.Equal(got, ended) {
		t.Fatalf("an ended stream: got %q, %v; want it unchanged", got, err)
	}
}
