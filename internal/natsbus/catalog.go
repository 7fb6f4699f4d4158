package natsbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MaxCatalogTools bounds the tools a [Catalog] holds; further entries are
// skipped and logged.
const MaxCatalogTools = 1024

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
		if old, err := kv.Get(ctx, spec.Name); err == nil {
			prev, derr := protocol.DecodeToolSpec(old.Value(), 0)
			if derr == nil && prev.SchemaDigest != spec.SchemaDigest {
				log.Warn().Str(logTool, spec.Name).Str(logOld, prev.SchemaDigest).Str(logNew, spec.SchemaDigest).
					Msg("tool schema differs from the one in the catalog: workers disagree; the newest spec wins")
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("natsbus: reading the catalog entry of %q: %w", spec.Name, err)
		}
		if _, err := kv.Put(ctx, spec.Name, data); err != nil {
			return fmt.Errorf("natsbus: publishing the spec of %q: %w", spec.Name, err)
		}
	}
	return nil
}

// Catalog is the coordinator's view of the tools the fleet serves: a cache
// of the catalog bucket that a watcher keeps current as workers publish
// their specs. It implements [loop.Catalog] and is safe for concurrent use.
type Catalog struct {
	log     zerolog.Logger
	watcher jetstream.KeyWatcher
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once

	mu      sync.RWMutex
	specs   map[string]protocol.ToolSpec
	changed chan struct{} // closed and replaced on every change to specs
}

var _ loop.Catalog = (*Catalog)(nil)

// NewCatalog loads the catalog bucket and keeps watching it until Close.
// It returns once the bucket's current entries are loaded. Malformed
// entries are skipped and logged by key and error code, never content.
func NewCatalog(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, log zerolog.Logger) (*Catalog, error) {
	kv, err := js.KeyValue(ctx, s.CatalogBucket())
	if err != nil {
		return nil, fmt.Errorf("natsbus: catalog bucket %s: %w", s.CatalogBucket(), err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("natsbus: watching the catalog: %w", err)
	}
	c := &Catalog{
		log:     log.With().Str(logBucket, s.CatalogBucket()).Logger(),
		watcher: w,
		cancel:  cancel,
		done:    make(chan struct{}),
		specs:   make(map[string]protocol.ToolSpec),
		changed: make(chan struct{}),
	}
	loaded := make(chan struct{})
	go c.watch(loaded)
	select {
	case <-loaded:
		return c, nil
	case <-c.done:
		c.Close()
		return nil, errors.New("natsbus: catalog watcher stopped while loading")
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("natsbus: loading the catalog: %w", ctx.Err())
	}
}

func (c *Catalog) watch(loaded chan struct{}) {
	defer close(c.done)
	bad := sampled(c.log)
	initial := true
	for e := range c.watcher.Updates() {
		if e == nil { // every entry present at start has been delivered
			if initial {
				initial = false
				close(loaded)
			}
			continue
		}
		c.apply(e, bad)
	}
	if !initial {
		c.log.Debug().Msg("catalog watcher stopped")
	}
}

func (c *Catalog) apply(e jetstream.KeyValueEntry, bad zerolog.Logger) {
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		c.mu.Lock()
		delete(c.specs, key)
		c.notifyLocked()
		c.mu.Unlock()
		return
	}
	spec, err := protocol.DecodeToolSpec(e.Value(), 0)
	if err == nil && spec.Name != key {
		err = codedError("name_mismatch")
	}
	if err != nil {
		bad.Warn().Str(logKey, clipKey(key)).Str(logCode, errorCode(err)).Msg("skipped a malformed catalog entry")
		c.mu.Lock()
		delete(c.specs, key)
		c.notifyLocked()
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notifyLocked()
	if _, ok := c.specs[key]; !ok && len(c.specs) >= MaxCatalogTools {
		bad.Warn().Str(logTool, key).Int("limit", MaxCatalogTools).Msg("catalog full: tool skipped")
		return
	}
	c.specs[key] = spec
}

// notifyLocked wakes every WaitFor. c.mu must be held for writing.
func (c *Catalog) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// WaitFor returns once the catalog lists every one of names, or with an
// error when ctx ends or the watcher stops first. It waits on the watcher's
// updates; it does not poll.
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
		case <-c.done:
			return fmt.Errorf("natsbus: catalog watcher stopped before it listed %q", missing)
		case <-ctx.Done():
			return fmt.Errorf("natsbus: waiting for the catalog to list %q: %w", missing, context.Cause(ctx))
		}
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
	slices.SortFunc(out, func(a, b protocol.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Close stops watching the bucket. It is idempotent. It returns once the
// watcher has stopped, without waiting for the server to delete the
// watcher's consumer: with the server unreachable that would take the
// client's 5s API timeout (the server drops the consumer on its own).
func (c *Catalog) Close() error {
	c.once.Do(func() {
		go c.watcher.Stop()
		c.cancel()
		<-c.done
	})
	return nil
}

// clipKey bounds a bucket key quoted in a log line.
func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}
