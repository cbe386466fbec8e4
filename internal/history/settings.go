package history

import (
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the metrics history's settings (internal/settings). The
// daemon gives them to Config.
type Settings struct {
	MetricsHistoryResolution time.Duration `env:"METRICS_HISTORY_RESOLUTION" envDefault:"5" help:"seconds between two samples of every running sandbox's CPU, memory, disk, pids and network denials (GET /v1/sandboxes/{id}/metrics, E2B getMetrics; docs/events.md); 0 = no history"`
	MetricsHistoryPoints     int           `env:"METRICS_HISTORY_POINTS" envDefault:"720" min:"16" max:"100000" help:"points kept per sandbox; when full, the older half is merged pairwise (half the resolution), so a sandbox's whole life stays covered, the recent half at full resolution"`
	MetricsHistoryFlush      time.Duration `env:"METRICS_HISTORY_FLUSH" envDefault:"30" help:"seconds between two writes of the sandboxes' new points to the state store (bbolt, or Redis for every replica), where a restarted daemon and other replicas read them; each sandbox's stored copy is merged down to at most 256 points (about 60 KB); 0 = memory only"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }
