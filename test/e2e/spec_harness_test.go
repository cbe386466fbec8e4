package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/api/spectest"
)

// Every exchange of a test with a daemon's native API (/v1) is checked
// against api/openapi.yaml (api/spectest): requests the document refuses
// must be refused, statuses, headers, content types and bodies must be
// those the document gives — NDJSON streams line by line. The checked
// clients are http.DefaultClient (d.call, http.Get/Post, websocket dials
// without a client of their own) and the Go SDK of d.sdk; a test's own
// http.Client with its own transport is not checked.
//
// Violations are collected per daemon and reported with t.Errorf when the
// daemon stops (at the cleanup of the test that started it), once per
// kind (operation, status, problem) with a count: a check runs on the
// transport's goroutines, possibly after the test function returned (a
// stream read by a cleanup), where failing the test at once is not
// possible, and one report per kind keeps a loop of 1,000 requests from
// burying the first finding.
//
// AGENTBOX_E2E_SPEC=off turns the check off.

var (
	specValidator *spectest.Validator
	// specDaemons maps a daemon's host:port to its checking transport.
	specDaemons sync.Map
)

// setUpSpecCheck is called by TestMain: it loads the document and routes
// http.DefaultClient through specDispatch.
func setUpSpecCheck() error {
	if os.Getenv("AGENTBOX_E2E_SPEC") == "off" {
		return nil
	}
	v, err := spectest.New(api.OpenAPI)
	if err != nil {
		return err
	}
	specValidator = v
	http.DefaultClient.Transport = specDispatch{}
	return nil
}

// specDispatch sends a request to a daemon started by this package through
// that daemon's checking transport, anything else straight on.
type specDispatch struct{}

func (specDispatch) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt, ok := specDaemons.Load(req.URL.Host); ok {
		return rt.(http.RoundTripper).RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// specHTTPClient is the http.Client of the daemons' SDK clients.
func specHTTPClient() *http.Client {
	if specValidator == nil {
		return &http.Client{}
	}
	return &http.Client{Transport: specDispatch{}}
}

// specLog is one daemon's violations.
type specLog struct {
	mu    sync.Mutex
	kinds map[string]*specKind
	host  string // the daemon's current host:port
	rt    http.RoundTripper
}

type specKind struct {
	first spectest.Violation
	n     int
}

func (l *specLog) add(v spectest.Violation) {
	key := v.Operation + "\x00" + fmt.Sprint(v.Status) + "\x00" + v.Problem
	if v.Operation == "" {
		key += "\x00" + v.Method + " " + v.Path
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.kinds[key]; k != nil {
		k.n++
		return
	}
	l.kinds[key] = &specKind{first: v, n: 1}
}

// specWatch starts checking the exchanges with d at its current URL.
func (d *daemon) specWatch() {
	if specValidator == nil {
		return
	}
	if d.spec == nil {
		d.spec = &specLog{kinds: map[string]*specKind{}}
		d.spec.rt = specValidator.Transport(http.DefaultTransport, d.spec.add)
	}
	u, err := url.Parse(d.url)
	if err != nil {
		return
	}
	if d.spec.host != "" {
		specDaemons.Delete(d.spec.host)
	}
	d.spec.host = u.Host
	specDaemons.Store(u.Host, d.spec.rt)
}

// specReport stops checking d and fails t with what was found.
func (d *daemon) specReport(t *testing.T) {
	if d.spec == nil {
		return
	}
	specDaemons.Delete(d.spec.host)
	d.spec.mu.Lock()
	defer d.spec.mu.Unlock()
	if len(d.spec.kinds) == 0 {
		return
	}
	var lines []string
	for _, k := range d.spec.kinds {
		s := k.first.String()
		if k.n > 1 {
			s += fmt.Sprintf("\n\t(%d times)", k.n)
		}
		lines = append(lines, s)
	}
	sort.Strings(lines)
	t.Errorf("the daemon's API does not match api/openapi.yaml (%d kinds of violation; see api/spectest):\n%s",
		len(lines), strings.Join(lines, "\n"))
}
