package httpbody

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// countingBody records whether the reader asked past the declared length.
type countingBody struct {
	r     io.Reader
	reads int
}

func (c *countingBody) Read(p []byte) (int, error) { c.reads++; return c.r.Read(p) }
func (c *countingBody) Close() error               { return nil }

func TestEndAtLengthReadsEOFWithTheLastBytes(t *testing.T) {
	src := &countingBody{r: strings.NewReader("hello")}
	b := EndAtLength(src, 5)
	buf := make([]byte, 5)
	n, err := b.Read(buf)
	if n != 5 || !errors.Is(err, io.EOF) {
		t.Fatalf("read %d bytes, err %v: want 5 and io.EOF with the last bytes", n, err)
	}
	if string(buf) != "hello" {
		t.Fatalf("read %q", buf)
	}
}

func TestEndAtLengthPassesShortReads(t *testing.T) {
	b := EndAtLength(&countingBody{r: strings.NewReader("hello world")}, 11)
	buf := make([]byte, 4)
	n, err := b.Read(buf)
	if n != 4 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	rest, err := io.ReadAll(b)
	if err != nil || string(rest) != "o world" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}
