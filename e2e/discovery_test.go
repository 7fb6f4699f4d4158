package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestNatsMicroListsWorkers starts two toolworker processes and asks the
// real nats CLI: "nats micro ls" lists both, with their tools, "nats micro
// info" shows a worker's tools with their schema digests and real call
// counts, and a stopped worker disappears from the list.
func TestNatsMicroListsWorkers(t *testing.T) {
	t.Parallel()
	nats := natscli.Path(t)
	f := newFleet(t)
	f.startWorker("disc-w1")
	w2 := startProc(t, "disc-w2", bins.toolworker, "--nats-url", f.url(), "--builtin", "calculator",
		"--name", "disc-w2", "--log-level", "debug")
	w2.waitLog(time.Minute, "worker started")

	cli := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, nats, append([]string{"--server", f.url(), "--timeout", "2s"}, args...)...)
		cmd.Env = natscli.Env(t)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	// listed returns the workers "nats micro ls --json" shows, by name.
	listed := func() map[string]micro.Info {
		var infos []micro.Info
		out := cli("micro", "ls", workerbus.ServiceName, "--json")
		if err := json.Unmarshal([]byte(out), &infos); err != nil {
			t.Fatalf("nats micro ls --json: %v\n%s", err, out)
		}
		byName := map[string]micro.Info{}
		for _, i := range infos {
			byName[i.Metadata[workerbus.MetaWorker]] = i
		}
		return byName
	}

	var workers map[string]micro.Info
	natstest.WaitFor(t, 10*time.Second, func() error {
		workers = listed()
		if len(workers) != 2 {
			return fmt.Errorf("nats micro ls lists %d workers, want disc-w1 and disc-w2", len(workers))
		}
		return nil
	})
	for name, tools := range map[string]string{"disc-w1": "charge,echo,work", "disc-w2": "calculator"} {
		if got := workers[name].Metadata[workerbus.MetaTools]; got != tools {
			t.Errorf("%s tools = %q, want %q", name, got, tools)
		}
	}

	// The plain table an operator reads names both workers and their tools.
	table := cli("micro", "ls")
	t.Logf("nats micro ls:\n%s", table)
	for _, want := range []string{workerbus.ServiceName, "disc-w1", "charge, echo, work", "disc-w2", "calculator"} {
		if !strings.Contains(table, want) {
			t.Errorf("nats micro ls does not show %q:\n%s", want, table)
		}
	}

	// A call through JetStream, then "nats micro info" shows each tool's
	// endpoint, digest and real call counts.
	run := f.coordinator("disc-run", script{turn(call("a", toolWork, map[string]any{"id": "disc"})), final("done")})
	if r := run.result(30*time.Second, 0); r.Calls[0].Worker != "disc-w1" {
		t.Fatalf("call answered by %q, want disc-w1", r.Calls[0].Worker)
	}
	info := cli("micro", "info", workerbus.ServiceName, workers["disc-w1"].ID, "--endpoint", "^work$")
	t.Logf("nats micro info:\n%s", info)
	for _, want := range []string{"fleet.tool.work", "schema_digest", "fleet.call.work", `"calls": 1`, `"ok": 1`} {
		if !strings.Contains(info, want) {
			t.Errorf("nats micro info does not show %q:\n%s", want, info)
		}
	}
	var ep []string
	for _, e := range workers["disc-w1"].Endpoints {
		ep = append(ep, e.Name)
		if e.Metadata[workerbus.MetaSchemaDigest] == "" || e.Metadata[workerbus.MetaSchema] == "" {
			t.Errorf("endpoint %s metadata = %v, want its schema and digest", e.Name, e.Metadata)
		}
	}
	slices.Sort(ep)
	if !slices.Equal(ep, []string{"charge", "echo", "work"}) {
		t.Errorf("disc-w1 endpoints = %v, want charge, echo, work", ep)
	}

	// A stopped worker leaves the list.
	w2.stop(10 * time.Second)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if w := listed(); len(w) != 1 || w["disc-w1"].ID == "" {
			return fmt.Errorf("after disc-w2 stopped, nats micro ls lists %d workers, want disc-w1 only", len(w))
		}
		return nil
	})
}
