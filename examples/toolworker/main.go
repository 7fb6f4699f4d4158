// Command toolworker is an example of a tool worker written with the
// toolfleet library: it serves two typed Go tools on a fleet.
//
//   - send_invoice is not idempotent: the fleet claims each call before it
//     runs, so it runs at most once, and the tool passes the call's
//     idempotency key to the billing API so that even a retry by hand is
//     charged once;
//   - refund requires an operator's approval of each call, which the worker
//     checks itself before running it.
//
// Run it against a fleet as its user worker:
//
//	go run ./examples/toolworker --nats-url "nats://worker:$TOOLFLEET_WORKER_PASSWORD@127.0.0.1:4222"
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// InvoiceIn is the input of send_invoice.
type InvoiceIn struct {
	Customer string `json:"customer" jsonschema:"the customer's account id"`
	Cents    int    `json:"cents" jsonschema:"the amount, in cents"`
}

// Invoice is send_invoice's output.
type Invoice struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

// RefundIn is the input of refund.
type RefundIn struct {
	Invoice string `json:"invoice" jsonschema:"the invoice to refund"`
}

// tools returns the worker's tools.
func tools() []harness.Tool {
	invoice := tool.Must(tool.New(tool.Config{Name: "send_invoice", Description: "Sends an invoice to a customer."},
		func(ctx context.Context, in InvoiceIn) (Invoice, error) {
			// A real tool sends tool.CallKeyFrom(ctx) as the billing API's
			// Idempotency-Key.
			return Invoice{ID: "inv-" + tool.CallKeyFrom(ctx), Customer: in.Customer, Cents: in.Cents}, nil
		}))
	refund := tool.Must(tool.New(tool.Config{Name: "refund", Description: "Refunds an invoice.", RequiresApproval: true},
		func(_ context.Context, in RefundIn) (string, error) {
			return "refunded " + in.Invoice, nil
		}))
	return []harness.Tool{invoice, refund}
}

// run serves the tools on the fleet at url until ctx ends; ready, when not
// nil, is closed once the tools are in the fleet's catalog.
func run(ctx context.Context, url string, ready chan<- struct{}) error {
	// A fleet's worker may read replies on its own inbox prefix only.
	nc, err := nats.Connect(url, nats.Name("example-toolworker"), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix("_INBOX_worker"))
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.New(nc, worker.Config{Tools: tools(), Concurrency: 4})
	if err != nil {
		return err
	}
	if ready != nil {
		go func() {
			select {
			case <-w.Published():
				close(ready)
			case <-ctx.Done():
			}
		}()
	}
	return w.Run(ctx)
}

func main() {
	url := flag.String("nats-url", nats.DefaultURL, "the fleet's NATS server")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, nil); err != nil {
		fmt.Fprintln(os.Stderr, "toolworker:", err)
		os.Exit(1)
	}
}
