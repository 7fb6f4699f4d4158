package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestDurableRunsCancelOnlyOnARequest: a served run waits for an approval
// ("coordinator serve" and "toolworker" processes); a server's
// acknowledgement and another run's request are stored on its cancel
// subject. The coordinator logs each as ignored, "coordinator runs show"
// does not say a cancel was requested, and the run waits on; "coordinator
// runs cancel" then cancels it.
func TestDurableRunsCancelOnlyOnARequest(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("w1")
	model := f.writeJSON("script.json", map[string]any{"turns": durableScript()})
	c := f.startServing("c1", model, "")
	run := f.submitRun("go")
	waiting := func() error {
		recs, err := stores.ReadJournal(t.Context(), f.js, protocol.Subjects{}, run)
		if err != nil {
			return err
		}
		if len(recs) == 0 || recs[len(recs)-1].Entry.Kind != loop.EntryApprovalRequested {
			return fmt.Errorf("%d entries, not waiting for an approval", len(recs))
		}
		return nil
	}
	natstest.WaitFor(t, 30*time.Second, waiting)

	for _, data := range []string{`{"stream":"FLEET_RUNS","seq":1}`, `{"v":1,"run_id":"someoneelse","by":"mallory"}`} {
		if _, err := f.js.Publish(t.Context(), "fleet.journal.cancel."+string(run), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	const ignored = `"message":"ignored a message on the run's cancel subject that is not a cancel request of the run naming its author"`
	natstest.WaitFor(t, 20*time.Second, func() error {
		if n := strings.Count(c.log(), ignored); n != 2 {
			return fmt.Errorf("%d cancel messages ignored, want 2", n)
		}
		return nil
	})
	cli := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), bins.coordinator, args...)
		cmd.Env = []string{"NATS_URL=" + f.url(), "USER=e2e-operator"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("coordinator %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("runs", "show", string(run)); strings.Contains(out, "cancel_requested") || strings.Contains(out, "finished") {
		t.Fatalf("runs show after ignored cancel messages:\n%s", out)
	}
	if err := waiting(); err != nil {
		t.Fatalf("the run after ignored cancel messages: %v", err)
	}

	cli("runs", "cancel", string(run), "--reason", "now")
	res, _, _ := f.runResult(run, 30*time.Second)
	if res.TerminationReason != "cancelled" {
		t.Fatalf("result %+v, want cancelled", res)
	}
}
