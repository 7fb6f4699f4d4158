package coordinator

import (
	"context"

	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// ServeConfig configures [Coordinator.Serve]: a [serve.Config] whose
// Prefix, JSDomain, Model, Loop, ProvisionStreams, StreamCheckInterval,
// Registerer and Logger are the Coordinator's (values set here are
// replaced), and whose Models, when nil, builds the shipped providers'
// models ([providers.Models], keys read with procsec.Getenv).
type ServeConfig = serve.Config

// Serve serves submitted runs on the coordinator's connection until ctx
// ends: [serve.New] and [serve.Server.Serve] with cfg completed from the
// coordinator's own configuration, in place of the coordinator's runner
// (closed first: Run and Fleet serve nothing after Serve). The
// coordinator's loop limits are the ceilings; with the embedded server the runs stream and bucket are
// provisioned to cfg; with MetricsAddr its metrics are served, and
// /readyz fails while the runs stream differs from its expected
// configuration. Serve may be called once per Coordinator.
func (c *Coordinator) Serve(ctx context.Context, cfg ServeConfig) error {
	cfg.Prefix = c.cfg.Prefix
	cfg.JSDomain = c.cfg.Conn.Domain()
	cfg.Model = c.cfg.Model
	cfg.Loop = c.cfg.Loop
	cfg.ProvisionStreams = c.server != nil
	cfg.StreamCheckInterval = c.cfg.StreamCheckInterval
	cfg.Logger = c.cfg.Logger
	cfg.Registerer = nil
	if c.obs != nil {
		cfg.Registerer = c.obs.reg
	}
	if cfg.Models == nil {
		cfg.Models = (&providers.Models{Getenv: procsec.Getenv, Logger: c.cfg.Logger}).Model
	}
	// The server checks the streams and reads the catalog itself: the
	// runner, which runs nothing meanwhile, stops, so that each check and
	// each anomaly of the catalog is counted once.
	c.runner.Close()
	s, err := serve.New(ctx, c.nc, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	c.answerStreams(s.Err)
	if url := c.ClientURL(); url != "" {
		c.log.Info().Str("nats_url", url).Str("credentials_file", c.CredentialsFile()).
			Msg("clients submit runs through the embedded server")
	}
	return s.Serve(ctx)
}
