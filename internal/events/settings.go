package events

import (
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the event log's settings (internal/settings). The daemon
// gives them to Config.
type Settings struct {
	EventsEnabled   bool          `env:"EVENTS_ENABLED" envDefault:"true" help:"record sandbox lifecycle events in the store (GET /v1/events, the event stream, webhooks; docs/events.md); false: none are recorded or delivered"`
	EventsRetention time.Duration `env:"EVENTS_RETENTION" envDefault:"604800" help:"seconds events are kept (default 7 days); 0 = no time limit"`
	EventsMax       int           `env:"EVENTS_MAX" envDefault:"50000" min:"0" max:"100000000" help:"events kept at most, the oldest trimmed first (every replica's together); 0 = no count limit"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }
