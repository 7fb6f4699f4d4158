package agents_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestRunsConfiguredWhileTheAgentsLeaderChanges configures runs, as a
// serving coordinator does for each run it takes (Registry.ForRun), on a
// 3-node cluster (the agents bucket R3) while the bucket's stream leader
// is asked to step down ($JS.API.STREAM.LEADER.STEPDOWN), and every third
// time its node is shut down instead and started again once a new leader
// is elected: nine leader changes, each once runs have gone on being
// configured since the last. New runs read the newest revision, which does
// not validate, so the kept history is read too; resumed runs read the
// revision their journal names. No run fails to be configured: each new
// one gets the newest valid revision, each resumed one its own.
func TestRunsConfiguredWhileTheAgentsLeaderChanges(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := natsbus.Provision(actx, js, s, natsbus.StreamConfig{Replicas: 3}); err != nil {
			return fmt.Errorf("waiting for the cluster to place three replicas: %w", err)
		}
		return nil
	})
	stream := "KV_" + s.AgentsBucket()
	natstest.WaitStreamsCurrent(t, js, time.Minute, stream)
	store, err := stores.OpenAgents(t.Context(), js, s)
	if err != nil {
		t.Fatal(err)
	}
	reg := &agents.Registry{Store: store, LookupEnv: func(n string) (string, bool) { return "k", n == "SUPPORT_API_KEY" }}
	_, started, err := reg.Put(t.Context(), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	_, newest, err := reg.Put(t.Context(), []byte(strings.Replace(doc, "kb_*", "deploy", 1)))
	if err != nil {
		t.Fatal(err)
	}
	// The newest revision does not validate: a new run passes over it to
	// the one before, reading the agent's history.
	if _, err := store.Put(t.Context(), "support", []byte(`{"name":"support"}`)); err != nil {
		t.Fatal(err)
	}
	resumed := []loop.JournalEntry{agent.JournalEntry(agent.Ref{Name: "support", Revision: started})}

	const faults = 9
	var (
		configured atomic.Int64
		failed     = make(chan error, 4)
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	configure := func(what string, entries []loop.JournalEntry, want agent.Ref, tool string) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			d, ref, _, err := reg.ForRun(t.Context(), "support", entries)
			switch {
			case err != nil:
				failed <- fmt.Errorf("a %s run was not configured: %w", what, err)
				return
			case ref != want || len(d.Tools) != 1 || d.Tools[0] != tool:
				failed <- fmt.Errorf("a %s run got %+v with tools %v, want %+v with [%s]", what, ref, d.Tools, want, tool)
				return
			}
			configured.Add(1)
		}
	}
	for range 2 {
		wg.Add(2)
		go configure("new", nil, agent.Ref{Name: "support", Revision: newest}, "deploy")
		go configure("resumed", resumed, agent.Ref{Name: "support", Revision: started}, "kb_*")
	}

	// goOn waits until runs have gone on being configured since the last
	// fault, or one failed.
	goOn := func(what string) {
		t.Helper()
		from := configured.Load()
		natstest.WaitFor(t, 2*time.Minute, func() error {
			select {
			case err := <-failed:
				t.Fatal(err)
			default:
			}
			if configured.Load() >= from+2 {
				return nil
			}
			return fmt.Errorf("waiting for runs to be configured %s (%d so far)", what, configured.Load())
		})
	}
	kills := c.ChangeLeaders(js, stream, faults, goOn)
	close(stop)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	t.Logf("%d runs configured across %d leader changes (%d of them a node shut down)", configured.Load(), faults, kills)
}
