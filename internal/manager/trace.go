package manager

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tracing"
)

// A create's span tree (docs/events.md, Traces): sandbox.create, with
// sandbox.place, pool.claim or pool.take, backend.create (claim, fork) and
// the backend's own phases under it, sandbox.wait_service and store.put.

func startCreateSpan(ctx context.Context, owner string, req CreateRequest) (context.Context, trace.Span) {
	return tracing.Tracer().Start(ctx, "sandbox.create", trace.WithAttributes(
		attribute.String("agentbox.user", owner),
		attribute.String("agentbox.template", req.Template),
		attribute.String("agentbox.type", req.Type),
	))
}

func endCreateSpan(span trace.Span, rec *store.Record, err error) {
	if rec != nil && span.IsRecording() {
		source := "cold"
		switch {
		case rec.FromPool:
			source = "pool"
		case rec.Provider != "":
			source = "remote"
		}
		span.SetAttributes(
			attribute.String("agentbox.sandbox", string(rec.ID)),
			attribute.String("agentbox.template", rec.Template),
			attribute.String("agentbox.source", source),
		)
	}
	endSpan(span, err)
}

// endPoolSpan ends a pool span, saying whether the pool served the create.
func endPoolSpan(span trace.Span, served bool, err error) {
	span.SetAttributes(attribute.Bool("agentbox.pool.hit", served))
	endSpan(span, err)
}

// endSpan records err (if any) on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
