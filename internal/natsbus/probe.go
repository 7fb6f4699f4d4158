package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [ProbeConfig].
const (
	DefaultProbeTimeout  = 2 * time.Second
	DefaultProbeCacheFor = 2 * time.Second
)

// ErrNotConnected is returned by [Probe.Healthy] and [Probe.Ready] while
// the NATS connection is down (reconnecting, or closed).
var ErrNotConnected = errors.New("natsbus: not connected to NATS")

// ConsumerRef names a durable consumer of a stream.
type ConsumerRef struct {
	Stream, Name string
}

// ProbeConfig says what a [Probe] checks. The zero value checks the
// connection only.
type ProbeConfig struct {
	// Streams must answer a stream-info request for the process to be
	// ready.
	Streams []string
	// Consumers must answer a consumer-info request for the process to be
	// ready.
	Consumers []ConsumerRef
	// Buckets are key-value buckets that must answer a status request.
	Buckets []string
	// Guards must find the expected stream configuration for the process
	// to be ready (see [StreamGuard]).
	Guards []*StreamGuard
	// Timeout bounds one readiness check, all streams and consumers
	// together. Default: 2s.
	Timeout time.Duration
	// CacheFor is how long a readiness check's answer is reused, so
	// frequent probes do not load JetStream. Default: 2s.
	CacheFor time.Duration
	// Now tells the time. Default: time.Now.
	Now func() time.Time
}

// Probe answers health and readiness checks from a connection's state and
// JetStream's answers. It is safe for concurrent use.
type Probe struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg ProbeConfig

	mu      sync.Mutex // one check at a time; guards the cache
	checked time.Time
	lastErr error
}

// NewProbe returns a Probe of nc's state and cfg's streams and consumers.
func NewProbe(nc *nats.Conn, js jetstream.JetStream, cfg ProbeConfig) *Probe {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultProbeTimeout
	}
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = DefaultProbeCacheFor
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Probe{nc: nc, js: js, cfg: cfg}
}

// Healthy reports whether the connection is up: nil when connected,
// [ErrNotConnected] otherwise.
func (p *Probe) Healthy(context.Context) error {
	if p.nc == nil || !p.nc.IsConnected() {
		return ErrNotConnected
	}
	return nil
}

// Ready reports whether the connection is up and every configured stream
// and consumer answers. The connection is checked on every call; the
// JetStream checks are cached for CacheFor. Errors name the stream or
// consumer and a short reason, never a payload.
func (p *Probe) Ready(ctx context.Context) error {
	if err := p.Healthy(ctx); err != nil {
		return err
	}
	for _, g := range p.cfg.Guards {
		if err := g.Err(); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	if !p.checked.IsZero() && now.Sub(p.checked) < p.cfg.CacheFor {
		return p.lastErr
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	p.lastErr = p.check(cctx)
	p.checked = p.cfg.Now()
	return p.lastErr
}

func (p *Probe) check(ctx context.Context) error {
	for _, name := range p.cfg.Streams {
		if _, err := p.js.Stream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %s", name, probeReason(err))
		}
	}
	for _, c := range p.cfg.Consumers {
		if _, err := p.js.Consumer(ctx, c.Stream, c.Name); err != nil {
			return fmt.Errorf("consumer %s of %s: %s", c.Name, c.Stream, probeReason(err))
		}
	}
	for _, b := range p.cfg.Buckets {
		if _, err := p.js.KeyValue(ctx, b); err != nil {
			return fmt.Errorf("bucket %s: %s", b, probeReason(err))
		}
	}
	return nil
}

// probeReason turns a JetStream error into a short reason.
func probeReason(err error) string {
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrBucketNotFound):
		return "not found"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer in time"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected):
		return "not connected"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "JetStream not enabled"
	case errors.Is(err, nats.ErrNoResponders):
		return "JetStream unavailable"
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return fmt.Sprintf("JetStream error %d", api.ErrorCode)
	}
	return "unavailable"
}

// FleetProbeConfig checks what a coordinator needs: the calls, results and
// approvals streams and the catalog bucket.
func FleetProbeConfig(s protocol.Subjects) ProbeConfig {
	return ProbeConfig{
		Streams: []string{s.CallsStream(), s.ResultsStream(), s.ApprovalsStream()},
		Buckets: []string{s.CatalogBucket()},
	}
}
