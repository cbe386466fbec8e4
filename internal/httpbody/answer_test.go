package httpbody

import (
	"net/http"
	"strings"
	"testing"
)

func TestAnswerKeepsStatusAndFirstLine(t *testing.T) {
	a := NewAnswer()
	a.WriteHeader(http.StatusConflict)
	a.WriteHeader(http.StatusOK) // a second status does not replace the first
	if _, err := a.Write([]byte("taken\nmore")); err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusConflict || a.FirstLine() != "taken" {
		t.Fatalf("status %d, first line %q", a.Status, a.FirstLine())
	}
	b := NewAnswer()
	b.Write([]byte(strings.Repeat("x", 300)))
	if b.Status != http.StatusOK || len(b.FirstLine()) != 200 {
		t.Fatalf("implicit status %d, first line of %d bytes", b.Status, len(b.FirstLine()))
	}
}

func TestAnswerIsBounded(t *testing.T) {
	a := NewAnswer()
	chunk := make([]byte, 16<<10)
	for i := 0; i < 4; i++ {
		if _, err := a.Write(chunk); err != nil {
			t.Fatalf("write %d within the bound: %v", i, err)
		}
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("a write past 64 KiB was accepted")
	}
	if a.Body.Len() != 64<<10 {
		t.Fatalf("kept %d bytes", a.Body.Len())
	}
}
