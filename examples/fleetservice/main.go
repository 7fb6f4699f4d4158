// Command fleetservice is an example of a service that serves its own
// agents and its own tools in one process, on the public packages alone:
// pkg/serve takes the runs clients submit (pkg/client, or "coordinator
// submit") and pkg/worker runs the tools those runs call.
//
//   - lookup_order is idempotent and answers at once;
//   - refund needs an operator's approval of each call
//     ("coordinator approvals approve", or client.Approve).
//
// Runs of the default agent (a submission naming none) are answered by the
// service's scripted model. A stored agent whose model is scripted
// ("provider": "scripted", its script in the definition) runs on that
// script; the service links no provider's SDK and refuses every other
// provider's agent, which a coordinator of the fleet that has the provider
// serves instead.
//
// Its two connections are two users of deploy/nats-server.conf: the
// coordinator's (env NATS_URL, with user and password) serves runs, the
// worker's (env WORKER_NATS_URL; default NATS_URL) serves tools.
//
//	NATS_URL="nats://coordinator:$COORDINATOR_PASSWORD@127.0.0.1:4222" \
//	WORKER_NATS_URL="nats://worker:$WORKER_PASSWORD@127.0.0.1:4222" \
//	go run ./examples/fleetservice
//
// SIGTERM hands the runs in flight off to the fleet's other coordinators
// and drains the calls the worker runs; the exit status is then 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/serve"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// OrderIn is the input of lookup_order and refund.
type OrderIn struct {
	Order string `json:"order" jsonschema:"the order's id"`
}

// Order is lookup_order's output.
type Order struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Cents  int    `json:"cents"`
}

// tools returns the service's tools.
func tools() []harness.Tool {
	lookup := tool.Must(tool.New(tool.Config{Name: "lookup_order", Description: "Looks an order up.", Idempotent: true},
		func(_ context.Context, in OrderIn) (Order, error) {
			return Order{ID: in.Order, Status: "delivered", Cents: 1250}, nil
		}))
	refund := tool.Must(tool.New(tool.Config{Name: "refund", Description: "Refunds an order.", RequiresApproval: true},
		func(_ context.Context, in OrderIn) (string, error) {
			return "refunded " + in.Order, nil
		}))
	return []harness.Tool{lookup, refund}
}

// defaultScript answers the runs of the default agent: it looks the order
// up and quotes what it found.
const defaultScript = `{"turns": [
	{"tool_calls": [{"id": "c1", "name": "lookup_order", "arguments": {"order": "A-17"}}]},
	{"content": "Order A-17: {{result \"c1\"}}"}]}`

// models builds the model of a stored agent: the scripted provider's only.
func models(m agent.Model) (loop.Model, error) {
	if m.Provider != "scripted" {
		return nil, fmt.Errorf("this service serves scripted agents only, not provider %q", m.Provider)
	}
	return scripted.Parse(m.Script)
}

// run serves runs and tools on the fleet until ctx ends. coordURL and
// workerURL are the two users' URLs.
func run(ctx context.Context, coordURL, workerURL string) error {
	model, err := scripted.Parse([]byte(defaultScript))
	if err != nil {
		return err
	}
	// Each user of the fleet may read replies on its own inbox prefix only.
	coord, err := nats.Connect(coordURL, nats.Name("example-fleetservice"), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix("_INBOX_coordinator"))
	if err != nil {
		return fmt.Errorf("connecting as the coordinator: %w", err)
	}
	defer coord.Close()
	wconn, err := nats.Connect(workerURL, nats.Name("example-fleetservice-worker"), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix("_INBOX_worker"))
	if err != nil {
		return fmt.Errorf("connecting as the worker: %w", err)
	}
	defer wconn.Close()

	w, err := worker.New(wconn, worker.Config{Tools: tools()})
	if err != nil {
		return err
	}
	srv, err := serve.New(ctx, coord, serve.Config{
		Models: models,
		Model:  model,
		Loop:   loop.Config{MaxRounds: 4, ApprovalTimeout: 10 * time.Minute},
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return srv.Serve(gctx) })
	g.Go(func() error {
		select {
		case <-w.Published():
			fmt.Println("fleetservice: serving")
		case <-gctx.Done():
		}
		return nil
	})
	return g.Wait()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	coordURL := os.Getenv("NATS_URL")
	if coordURL == "" {
		coordURL = nats.DefaultURL
	}
	workerURL := os.Getenv("WORKER_NATS_URL")
	if workerURL == "" {
		workerURL = coordURL
	}
	if err := run(ctx, coordURL, workerURL); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "fleetservice:", err)
		os.Exit(1)
	}
}
