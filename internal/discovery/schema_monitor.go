package discovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [SchemaMonitorConfig].
const (
	DefaultSchemaCheckInterval = 30 * time.Second
	DefaultSchemaCheckSettle   = time.Second
)

// maxLoggedConflictWorkers bounds the workers named in one conflict line.
const maxLoggedConflictWorkers = 16

// SchemaObserver receives a [SchemaMonitor]'s findings, for metrics. Its
// methods are called from the monitor's goroutine and must not block.
type SchemaObserver interface {
	// SchemaConflict is called when a conflict on tool is first seen, and
	// again each time its digests change. tool is a catalog tool name, or
	// "" when the catalog does not list it.
	SchemaConflict(tool string)
	// ConflictedTools is called after every check with the number of tools
	// in conflict.
	ConflictedTools(n int)
}

// SchemaMonitorConfig configures a [SchemaMonitor]. The zero value means
// the defaults.
type SchemaMonitorConfig struct {
	// Interval is the time between two checks. Default: 30s.
	Interval time.Duration
	// Settle is how long after a catalog change a check runs, so that the
	// worker that wrote the spec has registered. Default: 1s.
	Settle time.Duration
	// Discover bounds each discovery.
	Discover DiscoverConfig
	// Observer receives conflicts, for metrics. Default: nil.
	Observer SchemaObserver
	// Logger receives a warning per new or changed conflict and a line
	// when one is resolved. The zero value discards.
	Logger zerolog.Logger
}

// SchemaMonitor reports tools on whose schema the fleet disagrees. It
// watches the catalog bucket; when a tool's spec changes to another schema
// digest (a worker with another schema started while the old ones may
// still run), and every Interval, it asks the live workers what they serve
// ([Discover]) and compares ([FindSchemaConflicts]).
//
// It only reports. The coordinator keeps offering a conflicted tool with
// the catalog's spec: calls are validated against that spec, and every
// worker validates them again against its own, so a worker serving another
// schema answers invalid_arguments rather than running arguments it does
// not understand. Schemas are never silently mixed; the warning and the
// metric tell the operator to finish or roll back the rollout.
type SchemaMonitor struct {
	nc       *nats.Conn
	subjects protocol.Subjects
	cfg      SchemaMonitorConfig
	log      zerolog.Logger
	watch    *stores.KeyWatch
	trigger  chan struct{}
	cancel   context.CancelFunc
	loopDone sync.WaitGroup
	once     sync.Once

	mu        sync.Mutex
	catalog   map[string]string            // tool → schema digest
	reported  map[protocol.ToolName]string // tool → signature of the reported conflict
	conflicts []SchemaConflict

	checkMu sync.Mutex // one check at a time
}

// NewSchemaMonitor loads the catalog bucket and starts watching it and the
// workers until Close. The first check runs Settle after it starts.
func NewSchemaMonitor(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, s protocol.Subjects, cfg SchemaMonitorConfig) (*SchemaMonitor, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSchemaCheckInterval
	}
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSchemaCheckSettle
	}
	kv, err := stores.OpenBucket(ctx, js, s.CatalogBucket(), stores.KeyWatchConfig{})
	if err != nil {
		return nil, fmt.Errorf("discovery: catalog bucket %s: %w", s.CatalogBucket(), err)
	}
	m := &SchemaMonitor{
		nc: nc, subjects: s, cfg: cfg,
		log:      cfg.Logger.With().Str(logBucket, s.CatalogBucket()).Logger(),
		trigger:  make(chan struct{}, 1),
		catalog:  map[string]string{},
		reported: map[protocol.ToolName]string{},
	}
	// The watch survives node losses, reconnects and leader changes, and
	// reads the catalog in full each time it is made again.
	if m.watch, err = stores.WatchKeys(ctx, js, kv, (*schemaView)(m), stores.KeyWatchConfig{Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("discovery: watching the catalog: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	m.loopDone.Add(1)
	go m.loop(rctx)
	return m, nil
}

// schemaView is the [stores.KeyView] of a [SchemaMonitor]: the catalog's
// digests. A change of an existing tool's digest triggers a check.
type schemaView SchemaMonitor

// Load replaces the digests with entries.
func (v *schemaView) Load(entries []jetstream.KeyValueEntry) {
	m := (*SchemaMonitor)(v)
	m.mu.Lock()
	old := m.catalog
	m.catalog = make(map[string]string, len(old))
	changed := false
	for _, e := range entries {
		m.applyLocked(e)
	}
	for k, d := range old {
		if nd, ok := m.catalog[k]; ok && nd != d {
			changed = true
		}
	}
	m.mu.Unlock()
	if changed {
		m.poke()
	}
}

// Apply records one catalog change.
func (v *schemaView) Apply(e jetstream.KeyValueEntry) {
	m := (*SchemaMonitor)(v)
	m.mu.Lock()
	changed := m.applyLocked(e)
	m.mu.Unlock()
	if changed {
		m.poke()
	}
}

// poke asks the loop for a check Settle from now.
func (m *SchemaMonitor) poke() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// applyLocked records one catalog entry and reports whether it changed an
// existing tool's schema digest. m.mu must be held.
func (m *SchemaMonitor) applyLocked(e jetstream.KeyValueEntry) bool {
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.catalog, key)
		return false
	}
	spec, err := protocol.DecodeToolSpec(e.Value(), 0)
	if err != nil || string(spec.Name) != key {
		delete(m.catalog, key)
		return false
	}
	old, had := m.catalog[key]
	if !had && len(m.catalog) >= stores.MaxCatalogTools {
		return false
	}
	m.catalog[key] = spec.SchemaDigest
	return had && old != spec.SchemaDigest
}

// loop checks Settle after start, Settle after each catalog change and
// every Interval.
func (m *SchemaMonitor) loop(ctx context.Context) {
	defer m.loopDone.Done()
	settle := time.NewTimer(m.cfg.Settle)
	defer settle.Stop()
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.trigger:
			settle.Reset(m.cfg.Settle)
			continue
		case <-settle.C:
		case <-tick.C:
		}
		if _, err := m.Check(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn().Str(logCode, errorCode(err)).Msg("schema check failed: could not discover the workers")
		}
	}
}

// Check discovers the live workers now, compares their schemas with each
// other and the catalog, reports new, changed and resolved conflicts, and
// returns the conflicts found.
func (m *SchemaMonitor) Check(ctx context.Context) ([]SchemaConflict, error) {
	m.checkMu.Lock()
	defer m.checkMu.Unlock()
	workers, err := Discover(ctx, m.nc, m.subjects, m.cfg.Discover)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	catalog := make(map[string]string, len(m.catalog))
	for k, v := range m.catalog {
		catalog[k] = v
	}
	m.mu.Unlock()
	conflicts := FindSchemaConflicts(workers, catalog)

	seen := make(map[protocol.ToolName]bool, len(conflicts))
	for _, c := range conflicts {
		seen[c.Tool] = true
		sig := c.signature()
		m.mu.Lock()
		same := m.reported[c.Tool] == sig
		if !same && (len(m.reported) < stores.MaxCatalogTools || m.reported[c.Tool] != "") {
			m.reported[c.Tool] = sig
		}
		m.mu.Unlock()
		if same {
			continue
		}
		m.warn(c)
		if m.cfg.Observer != nil {
			tool := c.Tool
			if c.CatalogDigest == "" {
				tool = "" // not a catalog name: keep metric labels bounded
			}
			m.cfg.Observer.SchemaConflict(string(tool))
		}
	}
	m.mu.Lock()
	for tool := range m.reported {
		if !seen[tool] {
			delete(m.reported, tool)
			m.log.Info().Str(logTool, string(tool)).Msg("tool schema conflict resolved: live workers agree with the catalog")
		}
	}
	m.conflicts = conflicts
	m.mu.Unlock()
	if m.cfg.Observer != nil {
		m.cfg.Observer.ConflictedTools(len(conflicts))
	}
	return conflicts, nil
}

// warn logs one conflict: the tool, the catalog's digest and which worker
// serves which digest.
func (m *SchemaMonitor) warn(c SchemaConflict) {
	var served []string
	for _, d := range c.Digests {
		for _, w := range d.Workers {
			if len(served) == maxLoggedConflictWorkers {
				served = append(served, "…")
				break
			}
			served = append(served, w+"="+d.Digest)
		}
	}
	m.log.Warn().Str(logTool, string(c.Tool)).Str("catalog_digest", c.CatalogDigest).Strs("workers", served).
		Int("schemas", len(c.Digests)).
		Msg("workers disagree on a tool's schema: calls are validated against the catalog's spec, and workers serving another schema answer invalid_arguments")
}

// Conflicts returns the conflicts the last check found.
func (m *SchemaMonitor) Conflicts() []SchemaConflict {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]SchemaConflict(nil), m.conflicts...)
}

// Close stops the checks and the catalog watch. It is idempotent and does
// not wait for an unreachable server to delete the watch's consumer.
func (m *SchemaMonitor) Close() error {
	m.once.Do(func() {
		m.cancel()
		m.loopDone.Wait()
		m.watch.Close()
	})
	return nil
}
