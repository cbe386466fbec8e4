package webhook

import (
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the webhook settings (internal/settings). The daemon gives
// them to Config.
type Settings struct {
	WebhookAllowPrivate bool          `env:"WEBHOOK_ALLOW_PRIVATE" envDefault:"false" help:"let webhooks target loopback, private, link-local and reserved addresses and the daemon host's own; off, a tenant cannot aim deliveries into the operator's network"`
	WebhookTimeout      time.Duration `env:"WEBHOOK_TIMEOUT" envDefault:"10" help:"seconds one delivery attempt may take, connection to response"`
	WebhookMaxAttempts  int           `env:"WEBHOOK_MAX_ATTEMPTS" envDefault:"8" min:"1" max:"100" help:"attempts per event and webhook before the delivery is recorded failed"`
	WebhookBackoff      time.Duration `env:"WEBHOOK_RETRY_BACKOFF" envDefault:"1" help:"seconds before the second attempt; each later wait doubles (with jitter), at most 5 minutes"`
	WebhookQueue        int           `env:"WEBHOOK_QUEUE" envDefault:"1000" min:"1" max:"1000000" help:"deliveries one webhook may have waiting; more are dropped and recorded as dropped"`
	WebhookMaxPerUser   int           `env:"WEBHOOKS_MAX_PER_USER" envDefault:"20" min:"0" max:"100000" help:"webhooks one user may register; 0 = no limit"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }
