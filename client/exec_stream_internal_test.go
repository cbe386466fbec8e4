package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A reader handing out one byte at a time splits every line across reads.
func TestExecStreamOneByteReads(t *testing.T) {
	in := `{"type":"start","pid":1}` + "\n" +
		`{"type":"stdout","data":"a\nb"}` + "\r\n" +
		`{"type":"future-event"}` + "\n" +
		`{"type":"exit","exit_code":0}` // no final newline
	s := newExecStream(io.NopCloser(iotest.OneByteReader(strings.NewReader(in))))
	var got []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type+"="+ev.Data)
	}
	want := "start= stdout=a\nb future-event= exit="
	if strings.Join(got, " ") != want {
		t.Errorf("events %q, want %q", strings.Join(got, " "), want)
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after exit: %v", err)
	}
}

func TestExecStreamLineLimit(t *testing.T) {
	long := `{"type":"stdout","data":"` + strings.Repeat("x", maxEventLine) + `"}` + "\n"
	s := newExecStream(io.NopCloser(strings.NewReader(long)))
	if _, err := s.Next(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("got %v", err)
	}
}
