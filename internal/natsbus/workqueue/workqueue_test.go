package workqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestWorkQueueDecisions: the handler's decision settles its message —
// ack and term remove it for good, nak hands it back for another delivery,
// leave keeps it pending until the ack wait — and the queue never runs
// more handlers than it has slots.
func TestWorkQueueDecisions(t *testing.T) {
	eachMode(t, testWorkQueueDecisions)
}

// eachMode runs test with a queue pulling one request at a time (streamed
// false) and with one streaming its pulls (WorkQueueConfig.JS set).
func eachMode(t *testing.T, test func(t *testing.T, streamed bool)) {
	t.Run("fetching", func(t *testing.T) { test(t, false) })
	t.Run("streamed", func(t *testing.T) { test(t, true) })
}

// streamedOn is the JS a queue of the mode is configured with.
func streamedOn(js jetstream.JetStream, streamed bool) jetstream.JetStream {
	if streamed {
		return js
	}
	return nil
}

func testWorkQueueDecisions(t *testing.T, streamed bool) {
	_, js := queueServer(t)
	for _, subj := range []string{"q.ack", "q.term", "q.nak", "q.leave"} {
		if _, err := js.Publish(t.Context(), subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	running, most := 0, 0
	const slots = 2
	q := workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
		Slots: semaphore.NewWeighted(slots), MaxFetchBatch: 4, PollWait: 100 * time.Millisecond, JS: streamedOn(js, streamed),
		Ensure: func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
		},
	}, func(_ context.Context, d *workqueue.Delivery) workqueue.Decision {
		mu.Lock()
		seen[d.Msg.Subject()]++
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		switch d.Msg.Subject() {
		case "q.ack":
			return workqueue.Ack
		case "q.term":
			return workqueue.Term("test")
		case "q.nak":
			if d.Attempt == 1 {
				return workqueue.Nak(0)
			}
			return workqueue.Ack
		default:
			return workqueue.Leave
		}
	})
	if err := q.EnsureRetrying(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop := runQueue(t, q)
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if seen["q.ack"] != 1 || seen["q.term"] != 1 || seen["q.nak"] != 2 || seen["q.leave"] != 1 {
			return fmt.Errorf("deliveries %v", seen)
		}
		return nil
	})
	stop()
	st, _ := js.Stream(t.Context(), "Q")
	info, err := st.Info(t.Context())
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream holds %v messages (%v), want only the one left unsettled", info.State.Msgs, err)
	}
	if most > slots {
		t.Fatalf("%d handlers ran at once with %d slots", most, slots)
	}
}

// TestWorkQueueFreeSlot: a handler that gives its slot back early
// (Delivery.FreeSlot) lets the queue take the next message while it still
// waits, within the Settling allowance; with no room in Settling, the slot
// stays taken and the next message waits for the handler to return.
func TestWorkQueueFreeSlot(t *testing.T) {
	eachMode(t, testWorkQueueFreeSlot)
}

func testWorkQueueFreeSlot(t *testing.T, streamed bool) {
	for _, c := range []struct {
		name     string
		settling int64
		wantBoth bool // both messages handed out while the first handler waits
	}{
		{"room to settle", 1, true},
		{"no room to settle", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := natstest.Start(t)
			js, err := jetstream.New(natstest.Connect(t, srv))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.*"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
				t.Fatal(err)
			}
			for _, subj := range []string{"q.1", "q.2"} {
				if _, err := js.Publish(t.Context(), subj, nil); err != nil {
					t.Fatal(err)
				}
			}
			release := make(chan struct{})
			var mu sync.Mutex
			started := 0
			q := workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
				Slots: semaphore.NewWeighted(1), Settling: semaphore.NewWeighted(c.settling), PollWait: 100 * time.Millisecond, JS: streamedOn(js, streamed),
				Ensure: func(ctx context.Context) (jetstream.Consumer, error) {
					return js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
				},
			}, func(_ context.Context, d *workqueue.Delivery) workqueue.Decision {
				mu.Lock()
				started++
				first := started == 1
				mu.Unlock()
				if first {
					d.FreeSlot()
					d.FreeSlot() // a second call changes nothing
					<-release
				}
				return workqueue.Ack
			})
			if err := q.EnsureRetrying(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer runQueue(t, q)()
			count := func() int { mu.Lock(); defer mu.Unlock(); return started }
			if c.wantBoth {
				natstest.WaitFor(t, 10*time.Second, func() error {
					if n := count(); n != 2 {
						return fmt.Errorf("%d messages handed out while the first handler waits, want 2", n)
					}
					return nil
				})
				close(release)
				return
			}
			// The first handler holds the one slot: the second message stays
			// in the stream until the handler returns.
			natstest.WaitFor(t, 10*time.Second, func() error {
				if n := count(); n != 1 {
					return fmt.Errorf("%d messages handed out, want the first", n)
				}
				return nil
			})
			cons, err := js.Consumer(t.Context(), "Q", "c")
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // three of the queue's polls pass without taking it
				info, err := cons.Info(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if info.NumAckPending != 1 || count() != 1 {
					t.Fatalf("ack pending %d, handed out %d while the one slot is held; want 1 and 1", info.NumAckPending, count())
				}
				time.Sleep(100 * time.Millisecond) // observing that nothing happens, not synchronising
			}
			close(release)
			natstest.WaitFor(t, 10*time.Second, func() error {
				if n := count(); n != 2 {
					return fmt.Errorf("%d messages handed out after the slot came back, want 2", n)
				}
				return nil
			})
		})
	}
}
