package stores_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestResultStoredAcrossLeaderChanges stores results in the runs bucket
// on a 3-node cluster (R3), each by one writer asking again after a
// failure until it has an answer, as a serving coordinator stores a run's
// result, while the bucket's leader is asked to step down
// ($JS.API.STREAM.LEADER.STEPDOWN) and every third time its node is shut
// down instead: nine leader changes. Each writer is told it stored its
// result (created), also when an earlier attempt stored it and its
// answer was lost with the leader: no writer takes its own result for
// another coordinator's and drops it, and the bucket holds every result.
func TestResultStoredAcrossLeaderChanges(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	admin := bustest.ConnectJS(t, c.URLs(), opts...)
	provisionR3(t, admin, s)
	bucket := "KV_" + s.RunsBucket()
	natstest.WaitStreamsCurrent(t, admin, time.Minute, bucket)
	js := bustest.ConnectJS(t, c.URLs(), opts...)
	results, err := stores.OpenRunResults(t.Context(), js, s)
	if err != nil {
		t.Fatal(err)
	}

	const faults, writers = 9, 8
	var (
		mu      sync.Mutex
		stored  = map[string][]byte{}
		count   atomic.Int64
		dropped = make(chan error, writers)
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	write := func(w int) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("default.w%d-%d", w, i)
			data := fmt.Appendf(nil, `{"writer":%d,"n":%d}`, w, i)
			for {
				actx, cancel := context.WithTimeout(t.Context(), time.Second)
				created, err := results.Create(actx, key, data)
				cancel()
				if t.Context().Err() != nil {
					return
				}
				if err != nil {
					continue // asked again, as a coordinator stores its result
				}
				if !created {
					dropped <- fmt.Errorf("writer %d, the only writer of %s, was told another stored it", w, key)
					return
				}
				break
			}
			mu.Lock()
			stored[key] = data
			mu.Unlock()
			count.Add(1)
		}
	}
	for w := range writers {
		wg.Add(1)
		go write(w)
	}
	goOn := func(what string) {
		t.Helper()
		from := count.Load()
		natstest.WaitFor(t, 2*time.Minute, func() error {
			select {
			case err := <-dropped:
				t.Fatal(err)
			default:
			}
			if count.Load() >= from+writers {
				return nil
			}
			return fmt.Errorf("waiting for results to be stored %s (%d so far)", what, count.Load())
		})
	}
	kills := c.ChangeLeaders(admin, bucket, faults, goOn)
	close(stop)
	wg.Wait()
	close(dropped)
	for err := range dropped {
		t.Error(err)
	}
	t.Logf("%d results stored across %d leader changes (%d of them a node shut down)", count.Load(), faults, kills)
	for key, data := range stored {
		natstest.WaitFor(t, time.Minute, func() error {
			got, _, err := results.Entry(t.Context(), key)
			if err != nil {
				return fmt.Errorf("reading %s: %w", key, err)
			}
			if string(got) != string(data) {
				t.Fatalf("%s holds %s, want %s", key, got, data)
			}
			return nil
		})
	}
}
