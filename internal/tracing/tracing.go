// Package tracing sets up OpenTelemetry spans for the daemon: a tracer
// provider exporting over OTLP/HTTP when an endpoint is configured, and
// W3C trace context (traceparent, baggage) read from incoming requests.
//
// Without an endpoint nothing is installed: otel's global provider stays
// the no-op one, so the spans the packages start cost a context lookup and
// record nothing, while a caller's trace context is still carried through.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation is the name the daemon's tracers share.
const Instrumentation = "github.com/agentbox/agentbox"

// Tracer is the daemon's tracer (otel's global provider: the exporting one
// once Setup installed it, the no-op one before and without it).
func Tracer() trace.Tracer { return otel.Tracer(Instrumentation) }

// Propagator reads and writes W3C trace context and baggage.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Setup installs the exporting tracer provider when s names an endpoint,
// for the daemon's whole life. shutdown flushes the spans still queued and
// stops the exporter; call it once the server no longer serves. instance
// names this replica (service.instance.id), version the build.
func Setup(ctx context.Context, s Settings, instance, version string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	if !s.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	endpoint := s.OTLPTracesEndpoint
	if endpoint == "" {
		endpoint = strings.TrimRight(s.OTLPEndpoint, "/") + "/v1/traces"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL", endpoint)
	}
	headers, err := parseHeaders(s.OTLPHeaders)
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	if len(headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", s.ServiceName),
		attribute.String("service.instance.id", instance),
		attribute.String("service.version", version),
	)
	// Exports are batched off the request path (the batcher's queue drops
	// spans rather than block when the collector is slow or away).
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(s.SamplePercent)/100))),
	)
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", "err", err)
	}))
	log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", u.Redacted(), "sample_percent", s.SamplePercent)
	return tp.Shutdown, nil
}

// parseHeaders reads OTEL_EXPORTER_OTLP_HEADERS: key=value pairs,
// comma-separated, values URL-encoded (as the OTLP exporter spec says).
func parseHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}

// Extract returns ctx with the trace context of an incoming request's
// headers (a traceparent with no valid span is ignored).
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return Propagator.Extract(ctx, carrier)
}
