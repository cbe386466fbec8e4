package e2b

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/webhook"
)

// EncodeEvent is an event as E2B's webhooks deliver it (the dispatcher's
// "e2b" format).
func EncodeEvent(e events.Event) ([]byte, error) { return json.Marshal(toE2B(e)) }

// fromE2BTypes maps E2B's event types onto the native types they stand
// for (E2B's "updated" is every change it has no name of its own for).
var fromE2BTypes = map[string][]events.Type{
	"sandbox.lifecycle.created":      {events.Created},
	"sandbox.lifecycle.killed":       {events.Killed, events.Expired},
	"sandbox.lifecycle.paused":       {events.Paused},
	"sandbox.lifecycle.resumed":      {events.Resumed},
	"sandbox.lifecycle.checkpointed": {events.Snapshotted},
	"sandbox.lifecycle.updated": {events.Updated, events.Started, events.Stopped, events.Lost,
		events.Recovered, events.ProcessKilled},
}

// e2bWebhook is a webhook in E2B's shape.
type e2bWebhook struct {
	ID              string    `json:"id"`
	TeamID          string    `json:"teamID"`
	Name            string    `json:"name"`
	CreatedAt       time.Time `json:"createdAt"`
	Enabled         bool      `json:"enabled"`
	URL             string    `json:"url"`
	Events          []string  `json:"events"`
	SignatureSecret string    `json:"signatureSecret,omitempty"`
}

func toE2BWebhook(w webhook.Webhook, withSecret bool) e2bWebhook {
	out := e2bWebhook{ID: w.ID, TeamID: w.Owner, Name: w.Name, CreatedAt: w.CreatedAt, Enabled: w.Enabled, URL: w.URL, Events: []string{}}
	for name, types := range fromE2BTypes {
		for _, t := range types {
			if slices.Contains(w.Events, t) {
				out.Events = append(out.Events, name)
				break
			}
		}
	}
	slices.Sort(out.Events)
	if withSecret {
		out.SignatureSecret = w.Secret
	}
	return out
}

type e2bWebhookBody struct {
	Name            *string  `json:"name"`
	URL             *string  `json:"url"`
	Enabled         *bool    `json:"enabled"`
	Events          []string `json:"events"`
	SignatureSecret *string  `json:"signatureSecret"`
}

func (s *Server) applyWebhook(r *http.Request, b *e2bWebhookBody, w *webhook.Webhook) error {
	if b.URL != nil {
		u, err := webhook.CheckURL(r.Context(), *b.URL, s.cfg.WebhookAllowPrivate)
		if err != nil {
			return err
		}
		w.URL = u.String()
	}
	if b.Name != nil {
		w.Name = *b.Name
	}
	if b.Enabled != nil {
		w.Enabled = *b.Enabled
	}
	if b.Events != nil {
		w.Events = []events.Type{}
		for _, name := range b.Events {
			types, ok := fromE2BTypes[name]
			if !ok {
				return sandbox.Invalid("events", "unknown event type %q", name)
			}
			w.Events = append(w.Events, types...)
		}
	}
	if b.SignatureSecret != nil {
		if len(*b.SignatureSecret) < 8 || len(*b.SignatureSecret) > 256 {
			return sandbox.Invalid("signatureSecret", "signatureSecret must be 8 to 256 bytes")
		}
		w.Secret = *b.SignatureSecret
	}
	return nil
}

func (s *Server) webhooks() (*webhook.Registry, error) {
	if s.cfg.Webhooks == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "webhooks are off on this server (EVENTS_ENABLED=false)")
	}
	return s.cfg.Webhooks, nil
}

func (s *Server) forget(owner, deleted string) {
	if s.cfg.WebhookDispatcher != nil {
		s.cfg.WebhookDispatcher.Forget(owner, deleted)
	}
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, user string) error {
	reg, err := s.webhooks()
	if err != nil {
		return err
	}
	var b e2bWebhookBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	if b.URL == nil {
		return sandbox.Invalid("url", "url is required")
	}
	wh := webhook.Webhook{Owner: user, Enabled: true, Format: "e2b", Events: []events.Type{}}
	if err := s.applyWebhook(r, &b, &wh); err != nil {
		return err
	}
	created, err := reg.Create(r.Context(), wh)
	if err != nil {
		return err
	}
	s.forget(user, "")
	writeJSON(w, http.StatusCreated, toE2BWebhook(created, b.SignatureSecret == nil))
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, user string) error {
	reg, err := s.webhooks()
	if err != nil {
		return err
	}
	hooks, err := reg.List(r.Context(), user)
	if err != nil {
		return err
	}
	out := []e2bWebhook{}
	for _, h := range hooks {
		out = append(out, toE2BWebhook(h, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, user string) error {
	reg, err := s.webhooks()
	if err != nil {
		return err
	}
	wh, err := reg.Get(r.Context(), user, false, r.PathValue("webhookID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toE2BWebhook(wh, false))
	return nil
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request, user string) error {
	reg, err := s.webhooks()
	if err != nil {
		return err
	}
	var b e2bWebhookBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	wh, err := reg.Update(r.Context(), user, false, r.PathValue("webhookID"), func(wh *webhook.Webhook) error {
		return s.applyWebhook(r, &b, wh)
	})
	if err != nil {
		return err
	}
	s.forget(user, "")
	writeJSON(w, http.StatusOK, toE2BWebhook(wh, false))
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, user string) error {
	reg, err := s.webhooks()
	if err != nil {
		return err
	}
	id := r.PathValue("webhookID")
	if err := reg.Delete(r.Context(), user, false, id); err != nil {
		return err
	}
	s.forget(user, id)
	w.WriteHeader(http.StatusOK)
	return nil
}
