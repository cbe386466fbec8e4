package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/console"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/version"
)

// The web console (docs/console.md): its static shell at / (public, the
// same for everyone: it holds no data), the PTY tickets its terminal
// needs, and the operator's pool and overview routes.

// PTYProtocol is the websocket subprotocol of the PTY route. A browser
// cannot set an Authorization header on a websocket, so the console asks
// for a ticket with its key (POST .../pty-tickets) and offers it as a
// second subprotocol, PTYTicketPrefix+ticket: a header, never the URL, so
// no access log or proxy log records it.
const (
	PTYProtocol     = "agentbox.pty"
	PTYTicketPrefix = "agentbox.ticket."
	ptyTicketTTL    = 30 * time.Second
	maxPTYTickets   = 4096 // outstanding on the server
	maxUserTickets  = 64   // outstanding per user, so no one user exhausts the rest
)

type ptyTicket struct {
	user    string
	sandbox sandbox.ID
	expires time.Time
}

// ptyTickets are single-use, short-lived, bound to one user and sandbox.
type ptyTickets struct {
	mu sync.Mutex
	m  map[string]ptyTicket
}

func (t *ptyTickets) issue(user string, id sandbox.ID) (string, time.Time, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, err
	}
	tok := hex.EncodeToString(b)
	exp := time.Now().Add(ptyTicketTTL)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]ptyTicket{}
	}
	now := time.Now()
	mine := 0
	for k, v := range t.m {
		switch {
		case now.After(v.expires):
			delete(t.m, k)
		case v.user == user:
			mine++
		}
	}
	if mine >= maxUserTickets {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassQuota, "user %q has %d terminal tickets outstanding, the limit; retry in %s", user, mine, ptyTicketTTL)
	}
	if len(t.m) >= maxPTYTickets {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassQuota, "too many terminal tickets outstanding; retry in %s", ptyTicketTTL)
	}
	t.m[tok] = ptyTicket{user: user, sandbox: id, expires: exp}
	return tok, exp, nil
}

// redeem takes a ticket (once) and returns its user if it is valid for id.
func (t *ptyTickets) redeem(tok string, id sandbox.ID) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.m[tok]
	if !ok {
		return "", false
	}
	delete(t.m, tok)
	if time.Now().After(tk.expires) || tk.sandbox != id {
		return "", false
	}
	return tk.user, true
}

// wsTicket returns the ticket a websocket request offers as subprotocol.
func wsTicket(r *http.Request) string {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), PTYTicketPrefix); ok {
				return tok
			}
		}
	}
	return ""
}

// ticketUser authenticates a PTY websocket by its ticket. ok is false when
// the request carries none (then the usual bearer key applies).
func (s *Server) ticketUser(r *http.Request) (user string, ok bool, err error) {
	tok := wsTicket(r)
	if tok == "" || bearerToken(r) != "" || r.Pattern != "GET /v1/sandboxes/{id}/pty" {
		return "", false, nil
	}
	u, valid := s.tickets.redeem(tok, sandboxID(r))
	if !valid {
		return "", true, sandbox.Errorf(sandbox.ClassUnauth, "invalid or expired terminal ticket")
	}
	return u, true, nil
}

func (s *Server) consoleRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	s.mux.HandleFunc("GET /{$}", console.Index)
	s.mux.HandleFunc("GET "+console.AssetPrefix+"{file}", console.Asset)
	v1("POST /v1/sandboxes/{id}/pty-tickets", s.createPTYTicket)
	v1("GET /v1/pools", s.listPools)
	v1("GET /v1/admin/overview", s.adminOverview)
	v1("GET /v1/overview", s.overviewSeries)
}

func (s *Server) createPTYTicket(w http.ResponseWriter, r *http.Request) error {
	// The sandbox must be the caller's: no tickets for other tenants' ids.
	if _, err := s.m.Get(r.Context(), userOf(r), sandboxID(r)); err != nil {
		return err
	}
	tok, exp, err := s.tickets.issue(userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"ticket": tok, "expires_at": exp.UTC(), "protocols": []string{PTYProtocol, PTYTicketPrefix + tok},
	})
	return nil
}

// operator refuses callers who are not the server's operator.
func (s *Server) operator(r *http.Request, what string) error {
	if s.isTemplateAdmin(r) {
		return nil
	}
	return sandbox.Errorf(sandbox.ClassForbidden, "%s is for the operator (TEMPLATE_ADMIN_USERS); user %q is not one", what, userOf(r))
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	if err := s.operator(r, "pool statistics (every tenant's activity)"); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": s.m.PoolStats()})
	return nil
}

func (s *Server) adminOverview(w http.ResponseWriter, r *http.Request) error {
	if err := s.operator(r, "the server overview"); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"version": version.Version, "backend": s.m.Backend().Name(), "ready": s.m.Ready(),
		"uptime_seconds": time.Since(s.started).Seconds(),
		"overview":       s.m.Overview(), "pools": s.m.PoolStats(), "metrics": s.metricSummary(),
	})
	return nil
}

// metricSummary is the server's own counters and gauges (agentbox_*) as
// name{labels} → value; histograms give their count and sum.
func (s *Server) metricSummary() map[string]float64 {
	out := map[string]float64{}
	mfs, err := s.cfg.Registry.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "agentbox_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
				out[key+"_sum"] = m.Histogram.GetSampleSum()
			}
		}
	}
	return out
}
