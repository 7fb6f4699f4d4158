package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestDispatchAcrossLeaderChanges publishes calls on a 3-node cluster (the
// calls stream R3), one at a time (Dispatcher.Publish) and three at a time
// (Dispatcher.PublishBatch), each under its call's deadline as the loop
// publishes it, while the calls stream's leader is asked to step down
// ($JS.API.STREAM.LEADER.STEPDOWN), and every third time its node is shut
// down instead and started again once a new leader is elected: nine
// leader changes, each once calls have gone on being published since the
// last. No publish fails, and the calls stream holds every call published,
// each once: none lost, none stored twice by a publish asked again.
func TestDispatchAcrossLeaderChanges(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	admin := bustest.ConnectJS(t, c.URLs(), opts...)
	natstest.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := natsbus.Provision(actx, admin, s, natsbus.StreamConfig{Replicas: 3, MaxCallsPerClient: 100_000}); err != nil {
			return fmt.Errorf("waiting for the cluster to place three replicas: %w", err)
		}
		return nil
	})
	stream := s.CallsStream()
	natstest.WaitStreamsCurrent(t, admin, time.Minute, stream)
	js := bustest.ConnectJS(t, c.URLs(), opts...)
	d := dispatch.NewDispatcher(js.Conn(), js, s, dispatch.DispatcherConfig{})
	t.Cleanup(func() { d.Close() })

	const faults = 9
	const callDeadline = 2 * time.Minute // past any election's time
	var (
		mu        sync.Mutex
		published = map[protocol.CallKey]bool{} // calls whose publish returned nil
		count     atomic.Int64
		failed    = make(chan error, 4)
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	dispatch := func(tool protocol.ToolName, batch int) {
		defer wg.Done()
		run := protocol.NewRunID()
		for {
			select {
			case <-stop:
				return
			default:
			}
			outs := make([]loop.Outgoing, batch)
			for i := range outs {
				outs[i] = loop.Outgoing{Call: bustest.NewCall(run, tool, `{}`, callDeadline)}
			}
			pctx, cancel := context.WithDeadline(t.Context(), outs[0].Call.Deadline)
			var errs []error
			if batch == 1 {
				errs = []error{d.Publish(pctx, outs[0])}
			} else {
				errs = d.PublishBatch(pctx, outs)
			}
			cancel()
			for i, err := range errs {
				if err != nil {
					failed <- fmt.Errorf("a call to %s was not published within its deadline: %w", tool, err)
					return
				}
				mu.Lock()
				published[outs[i].Call.CallKey] = true
				mu.Unlock()
				count.Add(1)
			}
		}
	}
	for i := range 2 {
		wg.Add(2)
		go dispatch(protocol.ToolName(fmt.Sprintf("one_%d", i)), 1)
		go dispatch(protocol.ToolName(fmt.Sprintf("batch_%d", i)), 3)
	}
	goOn := func(what string) {
		t.Helper()
		from := count.Load()
		natstest.WaitFor(t, 2*time.Minute, func() error {
			select {
			case err := <-failed:
				t.Fatal(err)
			default:
			}
			if count.Load() >= from+4 {
				return nil
			}
			return fmt.Errorf("waiting for calls to be published %s (%d so far)", what, count.Load())
		})
	}
	kills := c.ChangeLeaders(admin, stream, faults, goOn)
	close(stop)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	t.Logf("%d calls published across %d leader changes (%d of them a node shut down)", count.Load(), faults, kills)

	// Every call published is stored, once.
	stored := map[protocol.CallKey]int{}
	natstest.WaitFor(t, 2*time.Minute, func() error {
		clear(stored)
		st, err := admin.Stream(t.Context(), stream)
		if err != nil {
			return fmt.Errorf("reading the calls stream: %w", err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			return fmt.Errorf("reading the calls stream: %w", err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(t.Context(), seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading the calls stream at %d: %w", seq, err)
			}
			call, err := protocol.DecodeCall(m.Data, len(m.Data)+1)
			if err != nil {
				return fmt.Errorf("the call stored at %d: %w", seq, err)
			}
			stored[call.CallKey]++
		}
		return nil
	})
	for key := range published {
		if stored[key] != 1 {
			t.Errorf("call %s was published and is stored %d times, want once", key, stored[key])
		}
	}
	for key, n := range stored {
		if !published[key] {
			t.Errorf("call %s is stored %d times but its publish never returned", key, n)
		}
	}
}
