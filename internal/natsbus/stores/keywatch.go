package stores

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// KeyView is what a [KeyWatch] keeps current: a process's view of a
// bucket's keys. Its methods are called from the watch's goroutine, one at
// a time, and must not block.
type KeyView interface {
	// Load replaces the whole view with entries: every key's last entry
	// (deletes and purges included) when the watch was made or made again.
	// A key the view holds that is not among entries no longer exists.
	Load(entries []jetstream.KeyValueEntry)
	// Apply applies one change stored after the last Load.
	Apply(e jetstream.KeyValueEntry)
}

const (
	DefaultKeyWatchResync = time.Minute

	DefaultKeyWatchStart = 30 * time.Second
)

// KeyWatchConfig configures [WatchKeys]. The zero value means the
// defaults.
type KeyWatchConfig struct {
	// Resync is how often the watch is made again, with a full read,
	// even when nothing showed that it broke: the bound on how long a
	// watch that went silent (its consumer lost with a node, and never
	// recreated) can leave the view stale. Default: 1m.
	Resync time.Duration
	// StartWait bounds how long [WatchKeys] waits for the first full
	// read, and [OpenBucket] for the bucket to answer, when the caller's
	// context allows longer: a process started while the cluster elects a
	// leader waits for it, one that finds no cluster fails. Default: 30s.
	StartWait time.Duration
	// MakeTimeout bounds one attempt to look the bucket up or to make the
	// watch (its consumer's creation): an answer lost with a node is asked
	// again, never waited on. Default: 5s.
	MakeTimeout time.Duration
	// Logger receives a debug line each time the watch is made again,
	// with why, and each failed attempt. Default: discard.
	Logger zerolog.Logger
}

// KeyWatch keeps a [KeyView] current with a bucket across node losses,
// reconnects and leader changes. The client library recreates a watch's
// consumer on its own when it can; when it cannot (the watch ends, or its
// connection comes back from a reconnect, or Resync passes), KeyWatch
// makes the watch again and hands the view the bucket's whole content with
// [KeyView.Load], so a change stored while the watch was down is never
// missed.
type KeyWatch struct {
	kv     jetstream.KeyValue
	nc     *nats.Conn
	view   KeyView
	cfg    KeyWatchConfig
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	loaded     chan struct{} // closed after the first Load
	loadedOnce sync.Once
}

// WatchKeys watches every key of kv for view until Close, over js's
// connection, and returns once view has had its first [KeyView.Load], or
// with an error when ctx ends or StartWait passes first. ctx bounds only
// that first load.
func WatchKeys(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, view KeyView, cfg KeyWatchConfig) (*KeyWatch, error) {
	cfg = cfg.withDefaults()
	ctx, cancelStart := context.WithTimeout(ctx, cfg.StartWait)
	defer cancelStart()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &KeyWatch{
		kv: kv, nc: js.Conn(), view: view, cfg: cfg, cancel: cancel,
		done: make(chan struct{}), loaded: make(chan struct{}),
	}
	w.cfg.Logger = cfg.Logger.With().Str(natsbus.LogBucket, kv.Bucket()).Logger()
	go w.run(wctx)
	select {
	case <-w.loaded:
		return w, nil
	case <-ctx.Done():
		w.Close()
		return nil, fmt.Errorf("natsbus: loading bucket %s: %w", kv.Bucket(), context.Cause(ctx))
	}
}

// withDefaults fills the zero fields of c.
func (c KeyWatchConfig) withDefaults() KeyWatchConfig {
	if c.StartWait <= 0 {
		c.StartWait = DefaultKeyWatchStart
	}
	if c.MakeTimeout <= 0 {
		c.MakeTimeout = natsbus.DefaultKeyWatchMake
	}
	if c.Resync <= 0 {
		c.Resync = DefaultKeyWatchResync
	}
	return c
}

// OpenBucket returns the bucket named bucket, asking again (each attempt
// bounded by cfg's MakeTimeout) while the cluster does not answer, for up
// to cfg's StartWait. A bucket that does not exist fails at once
// (jetstream.ErrBucketNotFound).
func OpenBucket(ctx context.Context, js jetstream.JetStream, bucket string, cfg KeyWatchConfig) (jetstream.KeyValue, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.StartWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, cancelAttempt := context.WithTimeout(ctx, cfg.MakeTimeout)
		kv, err := js.KeyValue(actx, bucket)
		cancelAttempt()
		switch {
		case err == nil:
			return kv, nil
		case errors.Is(err, jetstream.ErrBucketNotFound):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waited for the cluster to answer: %w)", err, context.Cause(ctx))
		case <-time.After(natsbus.Backoff(attempt)):
		}
	}
}

// Close stops the watch; the view is not called after it returns. It is
// idempotent, and does not wait for an unreachable server to delete the
// watch's consumer (the server drops it on its own).
func (w *KeyWatch) Close() error {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
	return nil
}

// run makes the watch, feeds the view, and makes it again whenever it
// ends, the connection comes back or Resync passes, until ctx ends.
func (w *KeyWatch) run(ctx context.Context) {
	defer close(w.done)
	status := w.nc.StatusChanged(nats.CONNECTED)
	defer w.nc.RemoveStatusListener(status)
	for attempt := 0; ; {
		why, err := w.watchOnce(ctx, status)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			attempt++
			w.cfg.Logger.Debug().Err(err).Int(logkey.Attempt, attempt).Msg("making the bucket's watch failed; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(natsbus.Backoff(attempt)):
			}
			continue
		}
		attempt = 0
		w.cfg.Logger.Debug().Str("reason", why).Msg("making the bucket's watch again, with a full read")
	}
}

// watchOnce makes one watch and feeds the view from it until it must be
// made again, and returns why; err is a failure to make it or to load it.
func (w *KeyWatch) watchOnce(ctx context.Context, reconnected <-chan nats.Status) (why string, err error) {
	// The watch lives as long as the context it is made with, so its
	// making is bounded apart: a request whose answer is lost with a node
	// would otherwise wait forever.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type made struct {
		kw  jetstream.KeyWatcher
		err error
	}
	ch := make(chan made, 1)
	go func() {
		kw, err := w.kv.WatchAll(wctx)
		ch <- made{kw, err}
	}()
	var kw jetstream.KeyWatcher
	select {
	case m := <-ch:
		if m.err != nil {
			return "", m.err
		}
		kw = m.kw
	case <-ctx.Done():
		return "stopped", nil
	case <-time.After(w.cfg.MakeTimeout):
		return "", fmt.Errorf("no answer within %v", w.cfg.MakeTimeout) // cancel ends the request, and a late watch
	}
	defer func() {
		// Stopping may wait for an unreachable server; and the watcher's
		// delivery blocks on a full channel: drain it until it closes.
		go func() {
			kw.Stop()
			for range kw.Updates() {
			}
		}()
	}()
	resync := time.NewTimer(w.cfg.Resync)
	defer resync.Stop()
	var initial []jetstream.KeyValueEntry
	loading := true
	for {
		select {
		case <-ctx.Done():
			return "stopped", nil
		case <-reconnected:
			if loading {
				return "", errors.New("reconnected while loading")
			}
			return "reconnected", nil
		case <-resync.C:
			if loading {
				return "", errors.New("the initial values did not come within the resync interval")
			}
			return "resync", nil
		case e, ok := <-kw.Updates():
			switch {
			case !ok && loading:
				return "", errors.New("the watch ended while loading")
			case !ok:
				return "the watch ended", nil
			case e == nil && loading:
				loading = false
				w.view.Load(initial)
				initial = nil
				w.loadedOnce.Do(func() { close(w.loaded) })
			case e == nil:
			case loading:
				initial = append(initial, e)
			default:
				w.view.Apply(e)
			}
		}
	}
}
