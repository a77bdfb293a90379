// Package metrics is sandboxapi's Prometheus registry: one private registry
// per process (never the global default), with the metrics every service
// reports and helpers they call. It does no I/O of its own; GET /metrics is
// served by the Handler.
//
// Services do not import each other; they take the small function or
// interface they need (an api.Observer, a func(decision, reason string))
// and the CLI hands them the methods of one *Metrics.
package metrics

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

const namespace = "sandboxapi"

// Metrics holds the registry and the metrics of every service. Build it
// with New; the zero value is not usable. All methods are safe for
// concurrent use and never block on I/O.
type Metrics struct {
	reg *prometheus.Registry

	requests        *prometheus.CounterVec
	requestSeconds  *prometheus.HistogramVec
	executions      *prometheus.CounterVec
	executionSecond *prometheus.HistogramVec
	egress          *prometheus.CounterVec
	mirrorHits      *prometheus.CounterVec
	mirrorRefusals  *prometheus.CounterVec
	readiness       *readinessCollector
	buildInfo       *prometheus.GaugeVec
	installs        *prometheus.CounterVec
	installSeconds  *prometheus.HistogramVec
	panics          *prometheus.CounterVec
	forwards        *prometheus.CounterVec
	takeovers       *prometheus.CounterVec
	scrape          *scrapeCollector
}

// New builds a registry with the Go and process collectors and every
// sandboxapi metric.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "http", Name: "requests_total",
		Help: "API requests by route pattern and HTTP status.",
	}, []string{"route", "status"})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
		Help:    "API request latency by route pattern.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"route"})
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "executions_total",
		Help: "Executions by language and status (ok, error, timeout, oom, output_limit, compile_error, failed).",
	}, []string{"language", "status"})
	m.executionSecond = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "execution_duration_seconds",
		Help:    "Execution latency by language, as the API saw it (sandbox start included for stateless calls).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"language"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "egress", Name: "decisions_total",
		Help: "Egress proxy decisions by outcome (allow, deny, error) and reason class.",
	}, []string{"decision", "reason"})
	m.mirrorHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "mirror", Name: "hits_total",
		Help: "Mirror artifacts and index pages served, by ecosystem (pypi, npm).",
	}, []string{"ecosystem"})
	m.mirrorRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "mirror", Name: "refusals_total",
		Help: "Mirror requests refused (not held, quarantined or removed), by ecosystem and reason; refusals at ingest are in sandboxapi_mirror_artifacts{status=\"refused\"}.",
	}, []string{"ecosystem", "reason"})
	m.readiness = &readinessCollector{vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "readiness", Name: "check",
		Help: "Readiness per check: 1 passing, 0 failing (pending and stale count as failing).",
	}, []string{"check"})}
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1; its labels name the running build: version, VCS revision and the runsc (gVisor) version.",
	}, []string{"version", "revision", "runsc"})
	m.installs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "installs_total",
		Help: "Package installs into sessions by manager (pip, npm) and outcome (ok, rejected, failed, error).",
	}, []string{"manager", "outcome"})
	m.installSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "install_duration_seconds",
		Help:    "Time one install took, checks and installer sandbox included, by manager and outcome.",
		Buckets: []float64{0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120},
	}, []string{"manager", "outcome"})
	m.panics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "panics_recovered_total",
		Help: "Panics recovered (and answered with a 500 where a request was being served), by component.",
	}, []string{"component"})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "cluster", Name: "forwards_total",
		Help: "Calls this node forwarded to the node that owns the session (or that a new session was placed on), by outcome (ok: the owner answered; unreachable: no connection; failed: the connection broke before a reply; refused: that node refused this node's signature, cluster.secret or clocks differ).",
	}, []string{"outcome"})
	m.takeovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "cluster", Name: "takeovers_total",
		Help: "Sessions this node claimed from another, by what the previous owner did (expired: its lease ran out; handover: it drained and released them; swept: an orphan idle past its TTL, claimed to end it).",
	}, []string{"from"})
	m.scrape = newScrapeCollector()
	m.reg.MustRegister(
		m.installs, m.installSeconds, m.panics, m.forwards, m.takeovers,
		m.scrape,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.requestSeconds, m.executions, m.executionSecond,
		m.egress, m.mirrorHits, m.mirrorRefusals, m.readiness, m.buildInfo,
	)
	return m
}

// Registry returns the registry, for tests and for services that bring
// collectors of their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveRequest counts one API request. route is the mux pattern
// ("POST /v1/sessions"), "" for a request that matched none.
func (m *Metrics) ObserveRequest(route string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveExecution counts one execution and its latency. The caller keeps
// language to a known set (runtime names or "other").
func (m *Metrics) ObserveExecution(language, status string, d time.Duration) {
	if status == "" {
		status = "failed"
	}
	m.executions.WithLabelValues(language, status).Inc()
	m.executionSecond.WithLabelValues(language).Observe(d.Seconds())
}

// EgressDecision counts one egress proxy decision: decision is allow, deny
// or fail; reason a short fixed code (not_allowed, private_address, ...),
// never a host name.
func (m *Metrics) EgressDecision(decision, reason string) {
	m.egress.WithLabelValues(decision, reason).Inc()
}

// SetBuildInfo names the running build in sandboxapi_build_info (one
// series, value 1); a later call replaces the earlier labels.
func (m *Metrics) SetBuildInfo(version, revision, runsc string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, revision, runsc).Set(1)
}

// Ecosystem returns the one spelling every metric uses for a package
// ecosystem: "pypi" for pip (or PyPI), "npm" for npm, "other" otherwise.
func Ecosystem(managerOrEcosystem string) string {
	switch strings.ToLower(managerOrEcosystem) {
	case "pip", "pypi":
		return "pypi"
	case "npm":
		return "npm"
	}
	return "other"
}

// ObserveInstall counts one install of manager ("pip" or "npm", as the
// request names it) with its outcome and duration.
func (m *Metrics) ObserveInstall(manager, outcome string, d time.Duration) {
	if manager != "pip" && manager != "npm" {
		manager = "other"
	}
	m.installs.WithLabelValues(manager, outcome).Inc()
	m.installSeconds.WithLabelValues(manager, outcome).Observe(d.Seconds())
}

// ClusterForward counts one call forwarded to another node, by outcome.
func (m *Metrics) ClusterForward(outcome string) { m.forwards.WithLabelValues(outcome).Inc() }

// ClusterTakeover counts one session claimed from another node, by what
// that node did (expired, handover).
func (m *Metrics) ClusterTakeover(from string) { m.takeovers.WithLabelValues(from).Inc() }

// RegisterClusterNodes makes sandboxapi_cluster_nodes_alive read f at
// scrape time (the nodes holding a lease; false omits the gauge). A later
// call replaces f; before any call (a single node) it is absent.
func (m *Metrics) RegisterClusterNodes(f func() (int, bool)) { m.scrape.nodes.Store(&f) }

// ObservePanic counts a recovered panic in component ("api", ...).
func (m *Metrics) ObservePanic(component string) { m.panics.WithLabelValues(component).Inc() }

// MirrorHit counts an artifact or index page the mirror served.
func (m *Metrics) MirrorHit(ecosystem string) {
	m.mirrorHits.WithLabelValues(Ecosystem(ecosystem)).Inc()
}

// MirrorRefusal counts a package the mirror refused (osv, not_binary,
// hash_mismatch, not_found, ...).
func (m *Metrics) MirrorRefusal(ecosystem, reason string) {
	m.mirrorRefusals.WithLabelValues(Ecosystem(ecosystem), reason).Inc()
}

// ReadinessCheck records the latest outcome of one readiness check.
func (m *Metrics) ReadinessCheck(check string, ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.readiness.vec.WithLabelValues(check).Set(v)
}

// RegisterReadiness makes every scrape read the latest outcome of each
// check from f (check name -> passing) first. f must not run the checks.
func (m *Metrics) RegisterReadiness(f func() map[string]bool) {
	m.readiness.mu.Lock()
	defer m.readiness.mu.Unlock()
	m.readiness.f = f
}

// readinessCollector is the readiness gauge, refreshed from f at scrape
// time when f is set.
type readinessCollector struct {
	vec *prometheus.GaugeVec
	mu  sync.Mutex
	f   func() map[string]bool
}

func (r *readinessCollector) Describe(ch chan<- *prometheus.Desc) { r.vec.Describe(ch) }

func (r *readinessCollector) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	f := r.f
	r.mu.Unlock()
	if f != nil {
		for name, ok := range f() {
			v := 0.0
			if ok {
				v = 1
			}
			r.vec.WithLabelValues(name).Set(v)
		}
	}
	r.vec.Collect(ch)
}

// SandboxStats reports how many sandboxes run and how many wait in the warm
// pool; it is called at scrape time and must be quick.
type SandboxStats func() (live, warm int)

// RegisterSandboxStats makes sandboxapi_sandboxes_live and
// sandboxapi_warm_pool_ready read f at scrape time. A later call replaces
// f (a second serve in one process); before any call they are absent.
func (m *Metrics) RegisterSandboxStats(f SandboxStats) { m.scrape.stats.Store(&f) }

// RegisterSessionsByPlan makes sandboxapi_sessions{plan} read f at scrape
// time. A later call replaces f.
func (m *Metrics) RegisterSessionsByPlan(f func() map[string]int) { m.scrape.byPlan.Store(&f) }

// HomeStats are the durable-session gauges: sessions by state (running,
// hibernated) and the homes' disk (committed: the sum of their sizes, which
// executor.max_disk caps; used: the blocks their images take).
type HomeStats func() (running, hibernated int, committed, used int64)

// RegisterHomeStats makes sandboxapi_sessions_by_state{state} and
// sandboxapi_homes_disk_bytes{kind} read f at scrape time.
func (m *Metrics) RegisterHomeStats(f HomeStats) { m.scrape.homes.Store(&f) }

// ArtifactCount is one row of the mirror's catalogue counted by ecosystem
// (pypi or npm; a manager name "pip" is exported as "pypi") and status (admitted, refused, quarantined, removed).
type ArtifactCount struct {
	Ecosystem, Status string
	N                 int
}

// RegisterOSVAge makes sandboxapi_osv_snapshot_age_seconds read f at
// scrape time; f returns false when there is no usable snapshot (the gauge
// is then absent). A later call replaces f.
func (m *Metrics) RegisterOSVAge(f func() (time.Duration, bool)) { m.scrape.osvAge.Store(&f) }

// RegisterMirrorArtifacts makes sandboxapi_mirror_artifacts{ecosystem,
// status} read f at scrape time. The catalogue is shared with the operator
// CLI, so refusals at ingest (`mirror add` in another process) show here
// too. A later call replaces f; an error from f omits the gauge.
func (m *Metrics) RegisterMirrorArtifacts(f func() ([]ArtifactCount, error)) {
	m.scrape.artifacts.Store(&f)
}

// scrapeCollector emits the gauges read from functions at scrape time.
type scrapeCollector struct {
	stats                      atomic.Pointer[SandboxStats]
	byPlan                     atomic.Pointer[func() map[string]int]
	artifacts                  atomic.Pointer[func() ([]ArtifactCount, error)]
	homes                      atomic.Pointer[HomeStats]
	osvAge                     atomic.Pointer[func() (time.Duration, bool)]
	nodes                      atomic.Pointer[func() (int, bool)]
	nodesAlive                 *prometheus.Desc
	live, warm, plans, catalog *prometheus.Desc
	byState, homeDisk          *prometheus.Desc
	osv                        *prometheus.Desc
}

func newScrapeCollector() *scrapeCollector {
	return &scrapeCollector{
		live:    prometheus.NewDesc(namespace+"_sandboxes_live", "Sandboxes running now (sessions, stateless calls, the warm pool, installers).", nil, nil),
		warm:    prometheus.NewDesc(namespace+"_warm_pool_ready", "Started, never-used sandboxes waiting in the warm pool.", nil, nil),
		plans:   prometheus.NewDesc(namespace+"_sessions", "Live sessions by plan.", []string{"plan"}, nil),
		catalog: prometheus.NewDesc(namespace+"_mirror_artifacts", "Mirror catalogue by ecosystem and status (admitted, refused at ingest, quarantined, removed).", []string{"ecosystem", "status"}, nil),
		byState: prometheus.NewDesc(namespace+"_sessions_by_state", "Live sessions by state (running: with a sandbox; hibernated: home only).", []string{"state"}, nil),
		homeDisk: prometheus.NewDesc(namespace+"_homes_disk_bytes", "Session homes' disk: committed (sum of home sizes, capped by executor.max_disk) and used (blocks the images take).",
			[]string{"kind"}, nil),
		osv:        prometheus.NewDesc(namespace+"_osv_snapshot_age_seconds", "Seconds since the current OSV snapshot was imported; absent when there is none.", nil, nil),
		nodesAlive: prometheus.NewDesc(namespace+"_cluster_nodes_alive", "Cluster nodes holding a lease (draining ones included), as the shared store says; absent on a single node.", nil, nil),
	}
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.warm
	ch <- c.plans
	ch <- c.catalog
	ch <- c.byState
	ch <- c.homeDisk
	ch <- c.osv
	ch <- c.nodesAlive
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	if f := c.stats.Load(); f != nil {
		live, warm := (*f)()
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(live))
		ch <- prometheus.MustNewConstMetric(c.warm, prometheus.GaugeValue, float64(warm))
	}
	if f := c.byPlan.Load(); f != nil {
		counts := (*f)()
		plans := make([]string, 0, len(counts))
		for p := range counts {
			plans = append(plans, p)
		}
		sort.Strings(plans)
		for _, p := range plans {
			ch <- prometheus.MustNewConstMetric(c.plans, prometheus.GaugeValue, float64(counts[p]), p)
		}
	}
	if f := c.homes.Load(); f != nil {
		running, hibernated, committed, used := (*f)()
		ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(running), string(sandbox.StateRunning))
		ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(hibernated), string(sandbox.StateHibernated))
		ch <- prometheus.MustNewConstMetric(c.homeDisk, prometheus.GaugeValue, float64(committed), "committed")
		ch <- prometheus.MustNewConstMetric(c.homeDisk, prometheus.GaugeValue, float64(used), "used")
	}
	if f := c.artifacts.Load(); f != nil {
		if rows, err := (*f)(); err == nil {
			for _, r := range rows {
				ch <- prometheus.MustNewConstMetric(c.catalog, prometheus.GaugeValue, float64(r.N), Ecosystem(r.Ecosystem), r.Status)
			}
		}
	}
	if f := c.osvAge.Load(); f != nil {
		if age, ok := (*f)(); ok {
			ch <- prometheus.MustNewConstMetric(c.osv, prometheus.GaugeValue, age.Seconds())
		}
	}
	if f := c.nodes.Load(); f != nil {
		if alive, ok := (*f)(); ok {
			ch <- prometheus.MustNewConstMetric(c.nodesAlive, prometheus.GaugeValue, float64(alive))
		}
	}
}

// InstrumentMirror counts the mirror's replies: 2xx and 304 as hits, 403,
// 404 and 410 as refusals (reason "status_<code>"), by ecosystem taken
// from the path (/mirror/pypi/..., /mirror/npm/...; "other" otherwise).
// Wrap the mirror's handler with it where it is mounted.
func (m *Metrics) InstrumentMirror(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		eco := "other"
		for _, e := range []string{"pypi", "npm"} {
			if strings.Contains(r.URL.Path, "/"+e+"/") {
				eco = e
				break
			}
		}
		switch {
		case sw.status/100 == 2 || sw.status == http.StatusNotModified:
			m.MirrorHit(eco)
		case sw.status == http.StatusForbidden || sw.status == http.StatusNotFound || sw.status == http.StatusGone:
			m.MirrorRefusal(eco, "status_"+strconv.Itoa(sw.status))
		}
	})
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
