package manager

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the manager's Prometheus collectors.
type Metrics struct {
	createdTotal   *prometheus.CounterVec
	createFailures prometheus.Counter
	createSeconds  *prometheus.HistogramVec
	phaseSeconds   *prometheus.HistogramVec
	destroyedTotal *prometheus.CounterVec
	recycledTotal  *prometheus.CounterVec
	poolHits       *prometheus.CounterVec
	poolMisses     *prometheus.CounterVec
	live           prometheus.Gauge
}

// latencyBuckets span 0.5 ms to 10 s: pool hits are milliseconds, cold
// creates tens of milliseconds, long execs seconds.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .03, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		createdTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandboxes_created_total", Help: "Sandboxes handed to callers, by source (pool, cold or remote: at a provider).",
		}, []string{"source"}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_sandbox_create_failures_total", Help: "Create requests that failed.",
		}),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_sandbox_create_seconds", Help: "Create latency seen by callers, by source.", Buckets: latencyBuckets,
		}, []string{"source"}),
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_sandbox_phase_seconds", Help: "Latency of lifecycle phases (backend_create, pool_fill).", Buckets: latencyBuckets,
		}, []string{"phase"}),
		destroyedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandboxes_destroyed_total", Help: "Sandboxes destroyed, by reason.",
		}, []string{"reason"}),
		recycledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandboxes_recycled_total", Help: "Deleted pooled sandboxes reset in place and returned to their pool (POOL_MAX_USES), by template.",
		}, []string{"template"}),
		poolHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_pool_hits_total", Help: "Creates served from a warm pool.",
		}, []string{"template"}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_pool_misses_total", Help: "Pool-eligible creates that found the pool empty.",
		}, []string{"template"}),
		live: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbox_sandboxes_live", Help: "Sandboxes that exist now, pooled ones included.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.createdTotal, m.createFailures, m.createSeconds, m.phaseSeconds,
			m.destroyedTotal, m.recycledTotal, m.poolHits, m.poolMisses, m.live)
	}
	return m
}

func (m *Metrics) created(source string, d time.Duration) {
	m.createdTotal.WithLabelValues(source).Inc()
	m.createSeconds.WithLabelValues(source).Observe(d.Seconds())
}

func (m *Metrics) createFailed() { m.createFailures.Inc() }
func (m *Metrics) phase(name string, d time.Duration) {
	m.phaseSeconds.WithLabelValues(name).Observe(d.Seconds())
}
func (m *Metrics) destroyed(reason string)  { m.destroyedTotal.WithLabelValues(reason).Inc() }
func (m *Metrics) recycled(template string) { m.recycledTotal.WithLabelValues(template).Inc() }
func (m *Metrics) poolHit(template string)  { m.poolHits.WithLabelValues(template).Inc() }
func (m *Metrics) poolMiss(template string) { m.poolMisses.WithLabelValues(template).Inc() }
func (m *Metrics) setLive(n int)            { m.live.Set(float64(n)) }
