package httpapi

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
)

func TestSecurityPreviewHostNames(t *testing.T) {
	for _, tc := range []struct {
		domain, host string
		preview, ok  bool
		port         int
	}{
		{"localhost", "8080-abc.localhost:8000", true, true, 8080},
		{"localhost", "8080-ABC.LOCALHOST.", true, true, 8080},
		{"localhost", "localhost:8000", false, false, 0},
		{"localhost", "api.localhost:8000", true, false, 0},
		{"localhost", "x.8080-abc.localhost", true, false, 0},
		{"localhost", "70000-abc.localhost", true, false, 0},
		{"preview.example.com", "3000-id1.preview.example.com", true, true, 3000},
		{"preview.example.com", "3000-id1.example.com", false, false, 0},
		{"preview.example.com", "evilpreview.example.com", false, false, 0},
		{"localhost:9000", "8080-abc.localhost:9000", true, true, 8080},
		{"localhost:9000", "8080-abc.localhost:8000", false, false, 0},
		{"", "8080-abc.localhost", false, false, 0},
	} {
		s := New(Config{PreviewDomain: tc.domain}, manager.New(manager.Config{}, nil, store.NewMemory()))
		if got := s.isPreviewHost(tc.host); got != tc.preview {
			t.Errorf("domain %q: isPreviewHost(%q) = %v", tc.domain, tc.host, got)
		}
		id, port, ok := s.previewTarget(tc.host)
		if ok != tc.ok || port != tc.port || (ok && id != "abc" && id != "id1") {
			t.Errorf("domain %q: previewTarget(%q) = %q %d %v", tc.domain, tc.host, id, port, ok)
		}
	}
}

func TestSecurityConfineCookies(t *testing.T) {
	h := http.Header{}
	h.Add("Set-Cookie", "a=1; Path=/; Domain=preview.example.com; HttpOnly")
	h.Add("Set-Cookie", "b=2;domain=.example.com")
	h.Add("Set-Cookie", "agentbox_preview=forged; Path=/")
	h.Add("Set-Cookie", "c=3")
	confineCookies(h)
	want := []string{"a=1; Path=/; HttpOnly", "b=2", "c=3"}
	if got := h.Values("Set-Cookie"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	h = http.Header{"Set-Cookie": {"a=1"}, "Content-Security-Policy": {"default-src 'self'"}}
	makeInert(h)
	if h.Get("Set-Cookie") != "" || !reflect.DeepEqual(h.Values("Content-Security-Policy"), []string{"default-src 'self'", "sandbox"}) {
		t.Errorf("path form headers: %v", h)
	}
}
