package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/webhook"
)

func (s *Server) eventRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/events", s.listEvents)
	v1("GET /v1/events/stream", s.streamEvents)
	v1("POST /v1/webhooks", s.createWebhook)
	v1("GET /v1/webhooks", s.listWebhooks)
	v1("GET /v1/webhooks/{webhook}", s.getWebhook)
	v1("PATCH /v1/webhooks/{webhook}", s.updateWebhook)
	v1("DELETE /v1/webhooks/{webhook}", s.deleteWebhook)
	v1("GET /v1/webhooks/{webhook}/deliveries", s.listDeliveries)
	v1("POST /v1/webhooks/{webhook}/deliveries/{delivery}/redeliver", s.redeliver)
}

func (s *Server) eventLog() (*events.Log, error) {
	if s.cfg.Events == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "events are off on this server (EVENTS_ENABLED=false)")
	}
	return s.cfg.Events, nil
}

// EventQuery reads the filters of an event request: sandbox, type
// (repeated or comma-separated), since and until (RFC 3339), after (the
// cursor; Last-Event-ID too), limit, and owner (operators only). A tenant
// sees only its own events, an operator (TEMPLATE_ADMIN_USERS) everyone's.
func EventQuery(r *http.Request, user string, operator bool) (events.Query, error) {
	v := r.URL.Query()
	q := events.Query{Owner: user, Sandbox: v.Get("sandbox")}
	if operator {
		q.Owner = v.Get("owner")
	} else if o := v.Get("owner"); o != "" && o != user {
		return q, sandbox.Errorf(sandbox.ClassForbidden, "only the operator reads other users' events")
	}
	for _, t := range v["type"] {
		for _, p := range strings.Split(t, ",") {
			if p = strings.TrimSpace(p); p != "" {
				q.Types = append(q.Types, events.Type(p))
			}
		}
	}
	window, err := parseLogPage(v, r.Header.Get("Last-Event-ID"))
	if err != nil {
		return q, err
	}
	q.Since, q.Until, q.After, q.Limit = window.Since, window.Until, window.After, window.Limit
	return q, q.Check()
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	el, err := s.eventLog()
	if err != nil {
		return err
	}
	q, err := EventQuery(r, userOf(r), s.isTemplateAdmin(r))
	if err != nil {
		return err
	}
	page, err := el.Query(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// streamPoll is how often a stream reads the log again when this replica
// recorded nothing (other replicas' events show within it).
const streamPoll = time.Second

// streamEvents serves the events as Server-Sent Events: each event's id
// is its number, so a client that reconnects with Last-Event-ID (or
// after=) gets the events after the last it saw, none lost or repeated.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	el, err := s.eventLog()
	if err != nil {
		return err
	}
	q, err := EventQuery(r, userOf(r), s.isTemplateAdmin(r))
	if err != nil {
		return err
	}
	q.Limit = events.MaxLimit
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, ": agentbox events\n\n"); err != nil {
		return nil
	}
	_ = rc.Flush()
	ctx := r.Context()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		changed := el.Changed() // before reading: an append after the read wakes us
		page, err := el.Query(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error()) //nolint:gosec // G705: a text/event-stream body, not HTML; the message is quoted
			_ = rc.Flush()
			return nil
		}
		for _, e := range page.Events {
			data, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data); err != nil {
				return nil
			}
		}
		q.After = page.Next
		if len(page.Events) > 0 {
			if rc.Flush() != nil {
				return nil
			}
		}
		if page.More {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.streamsEnd:
			return nil // the server shuts down: clients reconnect elsewhere
		case <-changed:
		case <-time.After(streamPoll):
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		}
	}
}

// EndStreams ends the open event streams (at shutdown: the HTTP server
// waits for active requests, and a stream never ends by itself).
func (s *Server) EndStreams() { s.endStreams.Do(func() { close(s.streamsEnd) }) }

func (s *Server) webhookRegistry() (*webhook.Registry, error) {
	if s.cfg.Webhooks == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "webhooks are off on this server (EVENTS_ENABLED=false)")
	}
	return s.cfg.Webhooks, nil
}

// webhookBody is a webhook create or update request.
type webhookBody struct {
	Name       *string       `json:"name"`
	URL        *string       `json:"url"`
	Events     []events.Type `json:"events"`
	Enabled    *bool         `json:"enabled"`
	Secret     *string       `json:"secret"`
	AllTenants *bool         `json:"all_tenants"`
}

func (s *Server) applyWebhook(r *http.Request, b *webhookBody, wh *webhook.Webhook) error {
	if b.URL != nil {
		u, err := webhook.CheckURL(r.Context(), *b.URL, s.cfg.WebhookAllowPrivate)
		if err != nil {
			return err
		}
		wh.URL = u.String()
	}
	if b.Name != nil {
		if len(*b.Name) > 200 {
			return sandbox.Invalid("name", "name longer than 200 bytes")
		}
		wh.Name = *b.Name
	}
	if b.Events != nil {
		for _, t := range b.Events {
			if !t.Valid() {
				return sandbox.Invalid("events", "unknown event type %q (want one of %v)", t, events.Types)
			}
		}
		wh.Events = b.Events
	}
	if b.Enabled != nil {
		wh.Enabled = *b.Enabled
	}
	if b.Secret != nil {
		if len(*b.Secret) < 16 || len(*b.Secret) > 256 {
			return sandbox.Invalid("secret", "secret must be 16 to 256 bytes (omit it to get a generated one)")
		}
		wh.Secret = *b.Secret
	}
	if b.AllTenants != nil {
		if *b.AllTenants && !s.isTemplateAdmin(r) {
			return sandbox.Errorf(sandbox.ClassForbidden, "only the operator may receive every tenant's events")
		}
		wh.AllTenants = *b.AllTenants
	}
	return nil
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	var b webhookBody
	if err := decodeJSON(w, r, 64<<10, &b, false); err != nil {
		return err
	}
	if b.URL == nil {
		return sandbox.Invalid("url", "url is required")
	}
	wh := webhook.Webhook{Owner: userOf(r), Enabled: true, Events: []events.Type{}}
	if err := s.applyWebhook(r, &b, &wh); err != nil {
		return err
	}
	created, err := reg.Create(r.Context(), wh)
	if err != nil {
		return err
	}
	s.forgetWebhook(created.Owner, "")
	writeJSON(w, http.StatusCreated, created) // the only answer with the secret
	return nil
}

func (s *Server) forgetWebhook(owner, deleted string) {
	if s.cfg.WebhookDispatcher != nil {
		s.cfg.WebhookDispatcher.Forget(owner, deleted)
	}
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	hooks, err := reg.List(r.Context(), userOf(r))
	if err != nil {
		return err
	}
	out := make([]webhook.Webhook, len(hooks))
	for i, h := range hooks {
		out[i] = h.Public()
	}
	writeJSON(w, http.StatusOK, map[string]any{"webhooks": out})
	return nil
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	wh, err := reg.Get(r.Context(), userOf(r), s.isTemplateAdmin(r), r.PathValue("webhook"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wh.Public())
	return nil
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	var b webhookBody
	if err := decodeJSON(w, r, 64<<10, &b, false); err != nil {
		return err
	}
	wh, err := reg.Update(r.Context(), userOf(r), s.isTemplateAdmin(r), r.PathValue("webhook"), func(wh *webhook.Webhook) error {
		return s.applyWebhook(r, &b, wh)
	})
	if err != nil {
		return err
	}
	s.forgetWebhook(wh.Owner, "")
	writeJSON(w, http.StatusOK, wh.Public())
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	id := r.PathValue("webhook")
	if err := reg.Delete(r.Context(), userOf(r), s.isTemplateAdmin(r), id); err != nil {
		return err
	}
	s.forgetWebhook(userOf(r), id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	wh, err := reg.Get(r.Context(), userOf(r), s.isTemplateAdmin(r), r.PathValue("webhook"))
	if err != nil {
		return err
	}
	ds, err := reg.Deliveries(r.Context(), wh.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": ds})
	return nil
}

// redeliver sends a delivery's event to its webhook again (the event read
// back from the event log), answering the delivery that is resent.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.webhookRegistry()
	if err != nil {
		return err
	}
	el, err := s.eventLog()
	if err != nil {
		return err
	}
	if s.cfg.WebhookDispatcher == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "webhooks are not delivered by this server")
	}
	wh, err := reg.Get(r.Context(), userOf(r), s.isTemplateAdmin(r), r.PathValue("webhook"))
	if err != nil {
		return err
	}
	ds, err := reg.Deliveries(r.Context(), wh.ID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ds, func(d webhook.Delivery) bool { return d.ID == r.PathValue("delivery") })
	if i < 0 {
		return sandbox.Errorf(sandbox.ClassNotFound, "no delivery %s of webhook %s among its last ones", r.PathValue("delivery"), wh.ID)
	}
	d := ds[i]
	if d.EventID == 0 {
		return sandbox.Errorf(sandbox.ClassNotFound, "delivery %s names no event", d.ID)
	}
	// The webhook is the caller's, and its deliveries carry only events it
	// was sent: the event is read without an owner filter (a webhook of
	// every tenant gets other owners' events).
	page, err := el.Query(r.Context(), events.Query{After: d.EventID - 1, Limit: 1})
	if err != nil {
		return err
	}
	if len(page.Events) == 0 || page.Events[0].ID != d.EventID {
		return sandbox.Errorf(sandbox.ClassNotFound, "event %d of delivery %s is no longer in the event log", d.EventID, d.ID)
	}
	if err := s.cfg.WebhookDispatcher.Redeliver(wh, page.Events[0]); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, d)
	return nil
}
