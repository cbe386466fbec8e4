package daemon

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/version"
)

// setUpTracing installs the OTLP span exporter when one is configured; it
// is closed after everything that makes spans (pushed before them), with
// the spans still queued flushed.
func (s *server) setUpTracing() error {
	shutdown, err := tracing.Setup(context.Background(), s.cfg.TracingSettings, s.node, version.Version, s.log)
	if err != nil {
		return err
	}
	s.push("traces", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return shutdown(ctx)
	})
	return nil
}
