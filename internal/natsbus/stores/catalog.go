package stores

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MaxCatalogTools bounds the tools a [Catalog] holds; further entries are
// skipped and logged.
const MaxCatalogTools = 1024

// Bounds of one catalog entry, which every model request carries: a larger
// description or schema is skipped with a warning and counted
// ([CatalogObserver]), so that no writer of the catalog can fill the
// model's context; all entries together are bounded by MaxCatalogBytes
// (entries past it are skipped as AnomalyFull). The fleets we know serve
// tens of tools of a few KiB.
const (
	MaxCatalogDescriptionBytes = 4 << 10
	MaxCatalogSchemaBytes      = 32 << 10
	MaxCatalogBytes            = 2 << 20
)

// Kinds of catalog anomalies, as [CatalogObserver.CatalogAnomaly] reports
// them.
const (
	// AnomalyApprovalConflict: an entry drops requires_approval that an
	// earlier entry for the tool declared. The tool keeps requiring it.
	AnomalyApprovalConflict = "approval_conflict"
	// AnomalyOversized: an entry over a description or schema bound;
	// skipped.
	AnomalyOversized = "oversized"
	// AnomalyFull: an entry past MaxCatalogTools or MaxCatalogBytes;
	// skipped.
	AnomalyFull = "full"
)

// CatalogObserver receives a [Catalog]'s anomalies, for metrics. It must be
// quick and never block.
type CatalogObserver interface {
	CatalogAnomaly(kind string)
}

// CatalogConfig configures [NewCatalogWith]. The zero value is ready to use.
type CatalogConfig struct {
	// Logger receives the catalog's warnings. Default: discard.
	Logger zerolog.Logger
	// Observer counts anomalies. Default: nil, count nothing.
	Observer CatalogObserver
}

// PublishSpecs writes each spec into the catalog bucket under its tool's
// name. A spec whose schema digest does not match its parameters is
// refused. When the bucket already holds a spec for the tool with another
// schema digest, a warning names the tool and both digests; the spec
// written last wins.
func PublishSpecs(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, specs []protocol.ToolSpec, log zerolog.Logger) error {
	kv, err := js.KeyValue(ctx, s.CatalogBucket())
	if err != nil {
		return fmt.Errorf("natsbus: catalog bucket %s: %w", s.CatalogBucket(), err)
	}
	for _, spec := range specs {
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("natsbus: spec of %q: %w", spec.Name, err)
		}
		digest, err := protocol.SchemaDigest(spec.Parameters)
		if err != nil || digest != spec.SchemaDigest {
			return fmt.Errorf("natsbus: spec of %q: schema_digest does not match its parameters", spec.Name)
		}
		data, err := protocol.Encode(&spec)
		if err != nil {
			return fmt.Errorf("natsbus: spec of %q: %w", spec.Name, err)
		}
		if old, err := kv.Get(ctx, string(spec.Name)); err == nil {
			prev, derr := protocol.DecodeToolSpec(old.Value(), 0)
			if derr == nil && prev.SchemaDigest != spec.SchemaDigest {
				log.Warn().Str(natsbus.LogTool, string(spec.Name)).Str(natsbus.LogOld, prev.SchemaDigest).Str(natsbus.LogNew, spec.SchemaDigest).
					Msg("tool schema differs from the one in the catalog: workers disagree; the newest spec wins")
			}
			if derr == nil && prev.RequiresApproval && !spec.RequiresApproval {
				// Never lowered by a later writer: a worker whose manifest
				// lacks the flag (drift) keeps the tool gated.
				log.Warn().Str(natsbus.LogTool, string(spec.Name)).
					Msg("the catalog says this tool requires approval and this worker's manifest does not: workers disagree; it keeps requiring approval")
				spec.RequiresApproval = true
				if data, err = protocol.Encode(&spec); err != nil {
					return fmt.Errorf("natsbus: spec of %q: %w", spec.Name, err)
				}
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("natsbus: reading the catalog entry of %q: %w", spec.Name, err)
		}
		if _, err := kv.Put(ctx, string(spec.Name), data); err != nil {
			return fmt.Errorf("natsbus: publishing the spec of %q: %w", spec.Name, err)
		}
	}
	return nil
}

// Catalog is the coordinator's view of the tools the fleet serves: a cache
// of the catalog bucket that a watcher keeps current as workers publish
// their specs. It implements [loop.Catalog] and is safe for concurrent use.
type Catalog struct {
	log   zerolog.Logger
	bad   zerolog.Logger // sampled: for malformed and oversized entries
	obs   CatalogObserver
	watch *KeyWatch

	mu      sync.RWMutex
	specs   map[string]protocol.ToolSpec
	revs    map[string]uint64 // the revision of each key's entry last applied, kept or skipped
	changed chan struct{}     // closed and replaced on every change to specs
	bytes   int               // descriptions and schemas of specs, together
	// gated holds every tool any entry ever declared requires_approval,
	// for the catalog's life: a later entry never lowers it.
	gated map[string]bool
}

var _ loop.Catalog = (*Catalog)(nil)

// NewCatalog loads the catalog bucket and keeps watching it until Close.
// It returns once the bucket's current entries are loaded. Malformed
// entries are skipped and logged by key and error code, never content.
// The watch survives node losses, reconnects and leader changes
// ([WatchKeys]).
func NewCatalog(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, log zerolog.Logger) (*Catalog, error) {
	return NewCatalogWith(ctx, js, s, CatalogConfig{Logger: log})
}

// NewCatalogWith is [NewCatalog] with an observer for the catalog's
// anomalies.
func NewCatalogWith(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg CatalogConfig) (*Catalog, error) {
	kv, err := OpenBucket(ctx, js, s.CatalogBucket(), KeyWatchConfig{})
	if err != nil {
		return nil, fmt.Errorf("natsbus: catalog bucket %s: %w", s.CatalogBucket(), err)
	}
	log := cfg.Logger.With().Str(natsbus.LogBucket, s.CatalogBucket()).Logger()
	c := &Catalog{
		log:     log,
		bad:     natsbus.Sampled(log),
		specs:   make(map[string]protocol.ToolSpec),
		revs:    make(map[string]uint64),
		changed: make(chan struct{}),
		gated:   make(map[string]bool),
		obs:     cfg.Observer,
	}
	if c.watch, err = WatchKeys(ctx, js, kv, (*catalogView)(c), KeyWatchConfig{Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("natsbus: watching the catalog: %w", err)
	}
	return c, nil
}

// catalogView is the [KeyView] of a [Catalog].
type catalogView Catalog

// Load replaces the catalog with entries. An entry applied before, at the
// same revision, is kept as it was: it is neither warned about nor counted
// again.
func (v *catalogView) Load(entries []jetstream.KeyValueEntry) {
	c := (*Catalog)(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		present[e.Key()] = true
	}
	for key := range c.revs {
		if !present[key] {
			c.remove(key)
			delete(c.revs, key)
		}
	}
	for _, e := range entries {
		if rev, ok := c.revs[e.Key()]; ok && rev == e.Revision() {
			continue
		}
		c.applyLocked(e)
	}
	c.notifyLocked()
}

// Apply applies one change to the bucket.
func (v *catalogView) Apply(e jetstream.KeyValueEntry) {
	c := (*Catalog)(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyLocked(e)
}

// applyLocked applies one entry; c.mu must be held for writing.
func (c *Catalog) applyLocked(e jetstream.KeyValueEntry) {
	key := e.Key()
	c.revs[key] = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		c.remove(key)
		return
	}
	spec, err := protocol.DecodeToolSpec(e.Value(), 0)
	if err == nil && string(spec.Name) != key {
		err = natsbus.CodedError("name_mismatch")
	}
	if err != nil {
		c.bad.Warn().Str(natsbus.LogKey, clipKey(key)).Str(natsbus.LogCode, natsbus.ErrorCode(err)).Msg("skipped a malformed catalog entry")
		c.remove(key)
		return
	}
	if len(spec.Description) > MaxCatalogDescriptionBytes || len(spec.Parameters) > MaxCatalogSchemaBytes {
		c.bad.Warn().Str(natsbus.LogTool, key).Int("description_bytes", len(spec.Description)).Int("schema_bytes", len(spec.Parameters)).
			Int("description_limit", MaxCatalogDescriptionBytes).Int("schema_limit", MaxCatalogSchemaBytes).
			Msg("catalog entry over its size bounds: tool skipped")
		c.anomaly(AnomalyOversized)
		c.remove(key)
		return
	}
	defer c.notifyLocked()
	old, had := c.specs[key]
	if !had && len(c.specs) >= MaxCatalogTools {
		c.bad.Warn().Str(natsbus.LogTool, key).Int("limit", MaxCatalogTools).Msg("catalog full: tool skipped")
		c.anomaly(AnomalyFull)
		return
	}
	if c.bytes-specBytes(old)+specBytes(spec) > MaxCatalogBytes {
		c.bad.Warn().Str(natsbus.LogTool, key).Int("limit_bytes", MaxCatalogBytes).Msg("catalog full (bytes): tool skipped")
		c.anomaly(AnomalyFull)
		return
	}
	c.bytes += specBytes(spec) - specBytes(old)
	switch {
	case spec.RequiresApproval:
		c.gated[key] = true
	case c.gated[key]:
		c.log.Warn().Str(natsbus.LogTool, key).
			Msg("a catalog entry drops requires_approval that an earlier one declared: workers disagree; the tool keeps requiring approval")
		c.anomaly(AnomalyApprovalConflict)
		spec.RequiresApproval = true
	}
	c.specs[key] = spec
}

// notifyLocked wakes every WaitFor. c.mu must be held for writing.
func (c *Catalog) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// WaitFor returns once the catalog lists every one of names, or with an
// error when ctx ends or the catalog is closed first. It waits on the
// watcher's updates; it does not poll.
func (c *Catalog) WaitFor(ctx context.Context, names ...string) error {
	for {
		c.mu.RLock()
		missing := ""
		for _, n := range names {
			if _, ok := c.specs[n]; !ok {
				missing = n
				break
			}
		}
		changed := c.changed
		c.mu.RUnlock()
		if missing == "" {
			return nil
		}
		select {
		case <-changed:
		case <-c.watch.done:
			return fmt.Errorf("natsbus: catalog watcher stopped before it listed %q", missing)
		case <-ctx.Done():
			return fmt.Errorf("natsbus: waiting for the catalog to list %q: %w", missing, context.Cause(ctx))
		}
	}
}

// specBytes is what a spec adds to every model request.
func specBytes(s protocol.ToolSpec) int { return len(s.Description) + len(s.Parameters) }

// remove forgets key; c.mu must be held for writing.
func (c *Catalog) remove(key string) {
	if old, ok := c.specs[key]; ok {
		c.bytes -= specBytes(old)
		delete(c.specs, key)
		c.notifyLocked()
	}
}

func (c *Catalog) anomaly(kind string) {
	if c.obs != nil {
		c.obs.CatalogAnomaly(kind)
	}
}

// Tools returns the specs currently in the catalog, sorted by name.
func (c *Catalog) Tools(ctx context.Context) ([]protocol.ToolSpec, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.RLock()
	out := make([]protocol.ToolSpec, 0, len(c.specs))
	for _, s := range c.specs {
		s.Parameters = slices.Clone(s.Parameters)
		out = append(out, s)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b protocol.ToolSpec) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out, nil
}

// Close stops watching the bucket. It is idempotent. It returns once the
// watcher has stopped, without waiting for the server to delete the
// watcher's consumer: with the server unreachable that would take the
// client's 5s API timeout (the server drops the consumer on its own).
func (c *Catalog) Close() error {
	return c.watch.Close()
}

// clipKey bounds a bucket key quoted in a log line.
func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}
