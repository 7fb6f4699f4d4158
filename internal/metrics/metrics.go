package metrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Namespace is the first part of every metric name.
const Namespace = "toolfleet"

// Special label values.
const (
	// UnknownTool labels a call of a tool the catalog does not list.
	UnknownTool = "_unknown"
	// OtherTool labels tools seen after MaxToolLabels distinct ones.
	OtherTool = "_other"
	// InvalidLabel labels a value outside its closed vocabulary.
	InvalidLabel = "_invalid"
)

// MaxToolLabels bounds the distinct tool label values of one metric set.
const MaxToolLabels = 512

// Histogram buckets, in seconds.
var (
	// CallBuckets spans fast built-ins to tools near their timeouts.
	CallBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// ModelBuckets spans model latencies.
	ModelBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160}
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors, for one process's metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// register registers c with reg and returns it, or, when reg already
// holds a collector of the same description (another component of the
// process, given the same registry), that one: the two share it.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}

// toolLabels bounds the tool label values of one metric set.
type toolLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// label returns the label value for tool: the name itself while fewer than
// MaxToolLabels names have been seen, UnknownTool for "" or an invalid
// name, OtherTool beyond the bound.
func (l *toolLabels) label(tool string) string {
	if tool == "" || len(tool) > 64 || !protocol.ValidToken(tool) {
		return UnknownTool
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[tool]; ok {
		return tool
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	if len(l.seen) >= MaxToolLabels {
		return OtherTool
	}
	l.seen[tool] = struct{}{}
	return tool
}

// outcomeLabel returns o, or InvalidLabel when o is not an outcome.
func outcomeLabel(o protocol.Outcome) string {
	if !o.Valid() {
		return InvalidLabel
	}
	return string(o)
}

// oneOf returns v when it is in vocabulary, else InvalidLabel.
func oneOf(v string, vocabulary ...string) string {
	for _, w := range vocabulary {
		if v == w {
			return v
		}
	}
	return InvalidLabel
}

// RegisterConn registers toolfleet_nats_connected, read at each scrape
// from connected, which reports whether the NATS connection is up (false
// while there is none yet).
func RegisterConn(reg prometheus.Registerer, connected func() bool) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace,
		Name:      "nats_connected",
		Help:      "1 while the process's NATS connection is up, 0 otherwise.",
	}, func() float64 {
		if connected() {
			return 1
		}
		return 0
	}))
}
