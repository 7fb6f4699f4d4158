package natsbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Actions of [Provision].
const (
	ActionCreated   = "created"
	ActionUpdated   = "updated"
	ActionUnchanged = "unchanged"
)

// ProvisionAction is what [Provision] did to one stream.
type ProvisionAction struct {
	// Stream is the stream's name (KV_<bucket> for a bucket).
	Stream string
	// Bucket is the bucket's name, "" for a plain stream.
	Bucket string
	// Action is ActionCreated, ActionUpdated or ActionUnchanged.
	Action string
	// Fields are the configuration fields an update changed, by their
	// JetStream names.
	Fields []string
}

// Provision creates every stream and bucket of [FleetStreams] that is
// missing and updates every one whose configuration differs, so that the
// fleet finds exactly its expected configuration. It is idempotent and is
// run by the provisioning identity (coordinator provision), the only one a
// deployment lets change streams. An existing stream's replicas are
// raised, never lowered, and its placement changes (the servers move it)
// only when cfg names placement tags. It returns what it did, stream by
// stream, also when it fails part way.
func Provision(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig) ([]ProvisionAction, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return ProvisionStreams(ctx, js, FleetStreams(s, cfg))
}

// ProvisionStreams is [Provision] of the streams of list.
func ProvisionStreams(ctx context.Context, js jetstream.JetStream, list []FleetStream) ([]ProvisionAction, error) {
	var done []ProvisionAction
	for _, fs := range list {
		var a ProvisionAction
		err := retryCreate(ctx, func() (err error) {
			a, err = provisionOne(ctx, js, fs)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("natsbus: stream %s: %w", fs.Config.Name, err)
		}
		done = append(done, a)
	}
	return done, nil
}

func provisionOne(ctx context.Context, js jetstream.JetStream, fs FleetStream) (a ProvisionAction, err error) {
	a = ProvisionAction{Stream: fs.Config.Name, Bucket: fs.Bucket}
	defer func() { err = placementError(fs.Config, err) }()
	st, err := js.Stream(ctx, fs.Config.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateStream(ctx, fs.Config); err != nil {
			return a, err
		}
		a.Action = ActionCreated
		return a, nil
	case err != nil:
		return a, err
	}
	got := st.CachedInfo().Config
	a.Fields = fs.Drift(got)
	if fs.Config.Placement != nil && !samePlacement(fs.Config.Placement, got.Placement) {
		a.Fields = append(a.Fields, "placement")
	}
	if len(a.Fields) == 0 {
		a.Action = ActionUnchanged
		return a, nil
	}
	if got.AllowMsgTTL && !fs.Config.AllowMsgTTL {
		return a, ErrStreamTakesTTLs
	}
	if _, err := js.UpdateStream(ctx, updateOf(fs.keepTunable(got), got)); err != nil {
		return a, err
	}
	a.Action = ActionUpdated
	return a, nil
}

// ErrStreamTakesTTLs refuses to update a stream that takes per-message
// TTLs (a starts stream made by an earlier release) to one that must not:
// nats-server cannot turn them off on a stream. The stream is removed and
// provisioned again once no call it guards is in flight
// (docs/failure-semantics.md, "The start record").
var ErrStreamTakesTTLs = errors.New("natsbus: the stream takes per-message TTLs, which the server cannot turn off: remove it once no call it guards is in flight, then provision again")

// updateOf is the configuration that restores want on a stream that has
// got: what the fleet does not ask for is kept — more replicas than want
// (replicas are raised, never lowered) and, when want names no placement,
// the placement an operator chose.
func updateOf(want, got jetstream.StreamConfig) jetstream.StreamConfig {
	if got.Replicas > want.Replicas {
		want.Replicas = got.Replicas
	}
	if want.Placement == nil {
		want.Placement = got.Placement
	}
	return want
}

// samePlacement reports whether got places a stream as want asks: the
// same cluster and the same tags, in any order and case (nats-server
// matches tags without case).
func samePlacement(want, got *jetstream.Placement) bool {
	if got == nil {
		got = &jetstream.Placement{}
	}
	norm := func(tags []string) []string {
		out := make([]string, len(tags))
		for i, t := range tags {
			out[i] = strings.ToLower(t)
		}
		slices.Sort(out)
		return out
	}
	return want.Cluster == got.Cluster && slices.Equal(norm(want.Tags), norm(got.Tags))
}

// createTimeout bounds one create of a missing stream at a process's
// start; a user without the grant gets no answer.
const createTimeout = 2 * time.Second

// CreateMissingStreams creates those of list that do not exist and
// changes none that exists: a process may create its fleet's streams on a
// server that lets it (a development server), never reconfigure one. A
// create that fails (under deploy/nats-server.conf no process but the
// provisioning identity may create streams) is left to the [StreamGuard],
// which reports the stream missing.
func CreateMissingStreams(ctx context.Context, js jetstream.JetStream, list []FleetStream, log zerolog.Logger) {
	for _, fs := range list {
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		_, err := js.Stream(cctx, fs.Config.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(cctx, fs.Config)
			switch {
			case err == nil:
				log.Info().Str(LogStream, fs.Config.Name).Msg("stream created")
			case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			default:
				log.Debug().Err(err).Str(LogStream, fs.Config.Name).Msg("could not create a missing stream")
			}
		}
		cancel()
	}
}

// JetStream's error codes for a replica count the servers cannot hold.
const (
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074 // a single server
	errCodeNoPeers              jetstream.ErrorCode = 10005 // too few cluster nodes
	errCodeInsufficient         jetstream.ErrorCode = 10023
)

// ErrTooFewServers reports a replica count the JetStream servers cannot
// hold: more than one replica on a single server, or more replicas than
// the cluster has nodes.
var ErrTooFewServers = errors.New("natsbus: too few JetStream servers for the replica count")

// ErrNoPlacement reports placement tags the JetStream servers cannot
// satisfy: fewer servers carry all the tags than the streams have
// replicas.
var ErrNoPlacement = errors.New("natsbus: too few JetStream servers with the placement tags")

// placementError names the replica count and the placement tags of cfg in
// err when the servers refused them for want of servers.
func placementError(cfg jetstream.StreamConfig, err error) error {
	var apiErr *jetstream.APIError
	if err == nil || !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported, errCodeNoPeers, errCodeInsufficient:
		if cfg.Placement != nil && len(cfg.Placement.Tags) > 0 && apiErr.ErrorCode != errCodeReplicasNotSupported {
			return fmt.Errorf("%w: %d replicas need %d JetStream servers tagged %s (server_tags), and the cluster has fewer (%s)",
				ErrNoPlacement, cfg.Replicas, cfg.Replicas, strings.Join(cfg.Placement.Tags, ","), apiErr.Description)
		}
		return fmt.Errorf("%w: %d replicas need a JetStream cluster of at least %d nodes (%s)", ErrTooFewServers, cfg.Replicas, cfg.Replicas, apiErr.Description)
	}
	return err
}
