// Package webhook delivers lifecycle events (internal/events) to the URLs
// tenants register: each delivery signed (HMAC-SHA256 over a timestamp and
// the body), retried with exponential backoff, its outcome recorded. Each
// endpoint has its own worker and bounded queue, so an endpoint that hangs
// or fails delays only its own deliveries, never the daemon or another
// endpoint's.
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Webhook is a registered endpoint.
type Webhook struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Name  string `json:"name,omitempty"`
	URL   string `json:"url"`
	// Events are the types delivered (empty: every type).
	Events  []events.Type `json:"events"`
	Enabled bool          `json:"enabled"`
	// AllTenants (operators only): every tenant's events, not the owner's.
	AllTenants bool `json:"all_tenants,omitempty"`
	// Format is the deliveries' body and extra headers: "" agentbox's
	// Event JSON; "e2b" E2B's event JSON and e2b-* headers (registered
	// through E2B's /events/webhooks).
	Format string `json:"format,omitempty"`
	// Secret signs deliveries; shown only in the answer that created it.
	Secret    string    `json:"secret,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (w *Webhook) wants(t events.Type) bool {
	return w.Enabled && (len(w.Events) == 0 || slices.Contains(w.Events, t))
}

// Public is w without its secret.
func (w Webhook) Public() Webhook {
	w.Secret = ""
	return w
}

// Delivery is the outcome of delivering one event to one webhook.
type Delivery struct {
	ID        string      `json:"id"` // the Agentbox-Delivery-Id header
	EventID   uint64      `json:"event_id"`
	EventType events.Type `json:"event_type"`
	SandboxID string      `json:"sandbox_id"`
	// Status: delivered, failed (every attempt failed) or dropped (the
	// endpoint's queue was full).
	Status     string    `json:"status"`
	Attempts   int       `json:"attempts"`
	StatusCode int       `json:"status_code,omitempty"` // of the last attempt
	Error      string    `json:"error,omitempty"`       // of the last attempt
	Time       time.Time `json:"time"`                  // of the last attempt
}

// Store kinds: webhooks by id (group: owner, or allGroup), and each
// webhook's recent deliveries (one document, key and group the webhook id).
const (
	kindWebhook    = "webhook"
	kindDeliveries = "webhook-deliveries"
	allGroup       = "\x00all-tenants"
	// keptDeliveries is how many outcomes a webhook's record keeps.
	keptDeliveries = 100
)

// Registry keeps webhooks in the store's documents (every replica sees
// them).
type Registry struct {
	docs    store.Docs
	maxUser int
}

// NewRegistry returns a registry over docs; maxPerUser caps each owner's
// webhooks (0: no cap).
func NewRegistry(docs store.Docs, maxPerUser int) *Registry {
	return &Registry{docs: docs, maxUser: maxPerUser}
}

func newID(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (r *Registry) put(ctx context.Context, w *Webhook) error {
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	group := w.Owner
	if w.AllTenants {
		group = allGroup
	}
	return r.docs.UpdateDoc(ctx, kindWebhook, group, w.ID, func([]byte) ([]byte, time.Duration, error) { return data, 0, nil })
}

// Create stores w (its ID, secret when empty and times are set) and
// returns it with its secret.
func (r *Registry) Create(ctx context.Context, w Webhook) (Webhook, error) {
	if r.maxUser > 0 {
		have, err := r.List(ctx, w.Owner)
		if err != nil {
			return Webhook{}, err
		}
		if len(have) >= r.maxUser {
			return Webhook{}, sandbox.Errorf(sandbox.ClassQuota, "user %q has %d webhooks, the most WEBHOOKS_MAX_PER_USER allows", w.Owner, len(have))
		}
	}
	w.ID = newID("wh_", 12)
	if w.Secret == "" {
		w.Secret = newID("whsec_", 24)
	}
	w.CreatedAt = time.Now().UTC()
	w.UpdatedAt = w.CreatedAt
	if err := r.put(ctx, &w); err != nil {
		return Webhook{}, fmt.Errorf("store webhook: %w", err)
	}
	return w, nil
}

// Get returns owner's webhook id (operator: anyone's), with its secret.
func (r *Registry) Get(ctx context.Context, owner string, operator bool, id string) (Webhook, error) {
	data, err := r.docs.Doc(ctx, kindWebhook, id)
	if err != nil {
		return Webhook{}, err
	}
	var w Webhook
	if data == nil || json.Unmarshal(data, &w) != nil || (!operator && w.Owner != owner) {
		return Webhook{}, sandbox.Errorf(sandbox.ClassNotFound, "no webhook %s", id)
	}
	return w, nil
}

// List returns owner's webhooks (with secrets), oldest first.
func (r *Registry) List(ctx context.Context, owner string) ([]Webhook, error) {
	out, err := r.group(ctx, owner)
	if err != nil {
		return nil, err
	}
	all, err := r.group(ctx, allGroup)
	if err != nil {
		return nil, err
	}
	for _, w := range all {
		if w.Owner == owner {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// forEvents returns the webhooks that may get owner's events: owner's own
// and the all-tenant ones.
func (r *Registry) forEvents(ctx context.Context, owner string) ([]Webhook, error) {
	own, err := r.group(ctx, owner)
	if err != nil {
		return nil, err
	}
	all, err := r.group(ctx, allGroup)
	if err != nil {
		return nil, err
	}
	return append(own, all...), nil
}

func (r *Registry) group(ctx context.Context, group string) ([]Webhook, error) {
	docs, err := r.docs.GroupDocs(ctx, kindWebhook, group)
	if err != nil {
		return nil, err
	}
	out := make([]Webhook, 0, len(docs))
	for _, d := range docs {
		var w Webhook
		if json.Unmarshal(d, &w) == nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// Update replaces w (found by ID and owner) with change(w).
func (r *Registry) Update(ctx context.Context, owner string, operator bool, id string, change func(*Webhook) error) (Webhook, error) {
	w, err := r.Get(ctx, owner, operator, id)
	if err != nil {
		return Webhook{}, err
	}
	wasAll := w.AllTenants
	if err := change(&w); err != nil {
		return Webhook{}, err
	}
	w.UpdatedAt = time.Now().UTC()
	if wasAll != w.AllTenants {
		// The group is fixed at the first write: move it.
		if err := r.delete(ctx, id, wasAll, w.Owner); err != nil {
			return Webhook{}, err
		}
	}
	if err := r.put(ctx, &w); err != nil {
		return Webhook{}, fmt.Errorf("store webhook: %w", err)
	}
	return w, nil
}

// Delete removes owner's webhook id and its delivery record.
func (r *Registry) Delete(ctx context.Context, owner string, operator bool, id string) error {
	w, err := r.Get(ctx, owner, operator, id)
	if err != nil {
		return err
	}
	if err := r.delete(ctx, id, w.AllTenants, w.Owner); err != nil {
		return err
	}
	return r.docs.UpdateDoc(ctx, kindDeliveries, id, id, func([]byte) ([]byte, time.Duration, error) { return nil, 0, nil })
}

func (r *Registry) delete(ctx context.Context, id string, all bool, owner string) error {
	group := owner
	if all {
		group = allGroup
	}
	return r.docs.UpdateDoc(ctx, kindWebhook, group, id, func([]byte) ([]byte, time.Duration, error) { return nil, 0, nil })
}

// Deliveries returns the recent outcomes of webhook id, newest first.
func (r *Registry) Deliveries(ctx context.Context, id string) ([]Delivery, error) {
	data, err := r.docs.Doc(ctx, kindDeliveries, id)
	if err != nil || data == nil {
		return []Delivery{}, err
	}
	var ds []Delivery
	if json.Unmarshal(data, &ds) != nil {
		return []Delivery{}, nil
	}
	slices.Reverse(ds)
	return ds, nil
}

// record adds d to webhook id's outcomes, keeping the newest
// keptDeliveries (one atomic update: replicas may record at once).
func (r *Registry) record(ctx context.Context, id string, d Delivery) error {
	return r.docs.UpdateDoc(ctx, kindDeliveries, id, id, func(old []byte) ([]byte, time.Duration, error) {
		var ds []Delivery
		if old != nil {
			_ = json.Unmarshal(old, &ds)
		}
		ds = append(ds, d)
		if len(ds) > keptDeliveries {
			ds = ds[len(ds)-keptDeliveries:]
		}
		data, err := json.Marshal(ds)
		return data, 0, err
	})
}
