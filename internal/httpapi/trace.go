package httpapi

import (
	"context"
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/internal/tracing"
)

// startRequestSpan starts the server span of a request, a child of the
// caller's span when the request carries W3C trace context. Its name is the
// method until the route is known (endRequestSpan).
func startRequestSpan(r *http.Request) (context.Context, trace.Span) {
	ctx := tracing.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return tracing.Tracer().Start(ctx, r.Method,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path),
			attribute.String("client.address", clientHost(r.RemoteAddr)),
		))
}

// endRequestSpan names the span after the route that served it (the mux's
// pattern, so ids do not make every span a name of its own), records the
// user and status, and ends it.
func endRequestSpan(span trace.Span, r *http.Request, acc *access, status int) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if r.Pattern != "" {
		route := r.Pattern
		if _, path, ok := strings.Cut(route, " "); ok {
			route = path
		}
		span.SetName(r.Method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if acc.user != "" {
		span.SetAttributes(attribute.String("agentbox.user", acc.user))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// clientHost is a request's remote address without its port.
func clientHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
