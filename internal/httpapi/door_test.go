package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// testDoor is a front end of the shape Door describes: routes under
// /<name>, refusals as "<name> <status>: <msg>", one multipart route, and
// (as a PortDoor) port 7000 of every sandbox.
type testDoor struct {
	name   string
	owns   func(r *http.Request) bool
	closed *[]string
	ports  *[]string
}

func (d testDoor) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /"+d.name+"/upload", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s took %s", d.name, r.Header.Get("Content-Type"))
	})
	mux.HandleFunc("POST /"+d.name+"/call", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s called", d.name)
	})
	mux.HandleFunc("POST /"+d.name+"/action", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s acted", d.name)
	})
}

func (d testDoor) Owns(r *http.Request) bool { return d.owns(r) }

func (d testDoor) WriteRefusal(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s %d: %s", d.name, status, msg)
}

func (d testDoor) Bodies() []BodyRule {
	return []BodyRule{{MediaType: "multipart/form-data", Match: func(r *http.Request) bool { return r.URL.Path == "/"+d.name+"/upload" }},
		{MediaType: "", Match: func(r *http.Request) bool { return r.URL.Path == "/"+d.name+"/action" }}}
}

func (d testDoor) Close() error {
	*d.closed = append(*d.closed, d.name)
	return errors.New(d.name + " failed to close")
}

type testPortDoor struct{ testDoor }

func (d testPortDoor) ServePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool {
	*d.ports = append(*d.ports, fmt.Sprintf("%s:%d %s", id, port, r.URL.Path))
	if port != 7000 {
		return false
	}
	fmt.Fprintf(w, "%s serves %s:%d", d.name, id, port)
	return true
}

// Doors mounted through Config.Doors get their routes, word the refusals
// of the requests they own (the first owner in their order; the native
// routes keep the native error), declare their non-JSON bodies, serve the
// sandbox ports they take, and are closed last first.
func TestDoors(t *testing.T) {
	var closed, ports []string
	first := testPortDoor{testDoor{name: "first", closed: &closed, ports: &ports,
		owns: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/first/") }}}
	rest := testDoor{name: "rest", closed: &closed, owns: func(*http.Request) bool { return true }}
	s := New(Config{Doors: []Door{first, rest}}, manager.New(manager.Config{}, nil, store.NewMemory()))
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	do := func(method, path, ctype string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path, ctype string
		status              int
		body                string
	}{
		{"POST", "/first/call", "application/json", 200, "first called"},
		{"POST", "/rest/call", "application/json", 200, "rest called"},
		// Each door's multipart route takes multipart; the other's does not.
		{"POST", "/first/upload", "multipart/form-data; boundary=x", 200, "first took multipart/form-data; boundary=x"},
		{"POST", "/rest/upload", "multipart/form-data; boundary=x", 200, "rest took multipart/form-data; boundary=x"},
		{"POST", "/first/call", "multipart/form-data; boundary=x", 400, "first 400: Content-Type must be application/json, got multipart/form-data; boundary=x"},
		// The first door that owns a refused request words it.
		{"POST", "/first/call", "text/plain", 400, "first 400: Content-Type must be application/json, got text/plain"},
		{"POST", "/elsewhere", "text/plain", 400, "rest 400: Content-Type must be application/json, got text/plain"},
		{"POST", "/first/upload", "application/json", 400, "first 400: Content-Type must be multipart/form-data, got application/json"},
	} {
		if status, body := do(c.method, c.path, c.ctype); status != c.status || body != c.body {
			t.Errorf("%s %s (%s): %d %q, want %d %q", c.method, c.path, c.ctype, status, body, c.status, c.body)
		}
	}
	// A bodiless route takes an empty body declared as anything (axios
	// declares a form), and a body only as JSON.
	for _, c := range []struct {
		body, ctype string
		status      int
	}{{"", "application/x-www-form-urlencoded", 200}, {"", "", 200}, {"{}", "application/json", 200}, {"x=1", "application/x-www-form-urlencoded", 400}} {
		req, _ := http.NewRequest("POST", hs.URL+"/first/action", strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("bodiless route with body %q (%s): %d, want %d", c.body, c.ctype, resp.StatusCode, c.status)
		}
	}
	// The native routes keep the native error, whoever claims the rest.
	status, body := do("POST", "/v1/sandboxes", "text/plain")
	if status != 400 || !strings.Contains(body, `"code":"invalid_argument"`) {
		t.Errorf("native route refused: %d %s", status, body)
	}
	// A request naming a sandbox port goes to the doors' ports first, then
	// to the preview proxy (which wants its credentials).
	status, body = do("GET", "/anything", "", "E2b-Sandbox-Id", "sb1", "E2b-Sandbox-Port", "7000")
	if status != 200 || body != "first serves sb1:7000" {
		t.Errorf("port 7000: %d %q", status, body)
	}
	status, body = do("GET", "/other", "", "E2b-Sandbox-Id", "sb1", "E2b-Sandbox-Port", "8080")
	if status != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) {
		t.Errorf("port 8080: %d %s, want the preview proxy's 401", status, body)
	}
	if want := []string{"sb1:7000 /anything", "sb1:8080 /other"}; !reflect.DeepEqual(ports, want) {
		t.Errorf("ports asked: %q, want %q", ports, want)
	}
	if err := s.Close(); err == nil || err.Error() != "rest failed to close" {
		t.Errorf("Close: %v, want the first error (the last door's)", err)
	}
	if want := []string{"rest", "first"}; !reflect.DeepEqual(closed, want) {
		t.Errorf("closed %q, want %q", closed, want)
	}
}
