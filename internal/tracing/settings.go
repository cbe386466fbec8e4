package tracing

import "github.com/agentbox/agentbox/internal/settings"

// Settings are the trace exporter's settings (internal/settings), under
// OpenTelemetry's own names so an operator's usual environment works.
type Settings struct {
	OTLPEndpoint       string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" envDefault:"" help:"OTLP/HTTP base URL spans are exported to (e.g. http://127.0.0.1:4318; /v1/traces is appended); empty with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT empty: no spans are made or exported (docs/events.md, Traces)"`
	OTLPTracesEndpoint string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" envDefault:"" help:"OTLP/HTTP URL of the traces receiver itself (used as given, path included); wins over OTEL_EXPORTER_OTLP_ENDPOINT"`
	OTLPHeaders        string `env:"OTEL_EXPORTER_OTLP_HEADERS" envDefault:"" help:"headers sent with every export, comma-separated key=value pairs (values URL-encoded), e.g. the collector's authorization"`
	ServiceName        string `env:"OTEL_SERVICE_NAME" envDefault:"agentbox" help:"service.name of the exported spans"`
	SamplePercent      int    `env:"TRACE_SAMPLE_PERCENT" envDefault:"100" min:"0" max:"100" help:"percent of the traces started here that are sampled; a request carrying a W3C traceparent follows its caller's sampling decision"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }

// Enabled reports whether spans are exported.
func (s Settings) Enabled() bool { return s.OTLPEndpoint != "" || s.OTLPTracesEndpoint != "" }
