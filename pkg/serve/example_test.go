package serve_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// A service that serves the fleet's runs until SIGTERM, each as its
// agent on the shipped providers, with the loop's limits as ceilings and
// its metrics on the default registry. (TestServeAnAgentFromOutside runs
// the same in a test fleet.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.UserCredentials(os.Getenv("NATS_CREDS")))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	srv, err := serve.New(ctx, nc, serve.Config{
		Name:       "billing-1",
		Models:     (&providers.Models{}).Model,
		Loop:       loop.Config{MaxRounds: 8},
		Registerer: prometheus.DefaultRegisterer,
		Logger:     zerolog.New(os.Stderr),
	})
	if err != nil {
		panic(err) // a *serve.ConfigError names the field; a stream configured otherwise is named
	}
	defer srv.Close()
	if err := srv.Serve(ctx); err != nil { // runs in flight are handed off when ctx ends
		panic(err)
	}
}
