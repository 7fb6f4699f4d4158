package workqueue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

// queueServer starts a server holding the empty work-queue stream Q, on
// q.*, and returns it and a JetStream context on it.
func queueServer(t *testing.T) (*embedded.Server, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.*"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

// queueStream makes the work-queue stream Q on a fresh server, holding n
// messages, and returns the JetStream context and an Ensure of its
// consumer "c" (ack wait a minute: a message left unacknowledged would
// not come back within a test).
func queueStream(t *testing.T, n int) (jetstream.JetStream, func(context.Context) (jetstream.Consumer, error)) {
	t.Helper()
	_, js := queueServer(t)
	for i := range n {
		if _, err := js.Publish(t.Context(), fmt.Sprintf("q.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	return js, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	}
}

// runQueue runs q until the returned stop is called; stop returns once
// Run has.
func runQueue(t *testing.T, q *workqueue.WorkQueue) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx, context.Background()) }()
	return func() { cancel(); <-done }
}

// TestQueueTakesNoMoreThanItsSlots: with every handler held, the server
// has delivered exactly as many messages as the queue has slots, and no
// more however many of the queue's polls pass — whether it pulls one
// request at a time or streams its requests; released, the handlers
// take every message.
func TestQueueTakesNoMoreThanItsSlots(t *testing.T) {
	eachMode(t, func(t *testing.T, streamed bool) {
		const slots, total = 3, 20
		js, ensure := queueStream(t, total)
		release := make(chan struct{})
		var handled atomic.Int64
		q := workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
			Slots: semaphore.NewWeighted(slots), MaxFetchBatch: 4, PollWait: 100 * time.Millisecond,
			Ensure: ensure, JS: streamedOn(js, streamed),
		}, func(context.Context, *workqueue.Delivery) workqueue.Decision {
			<-release
			handled.Add(1)
			return workqueue.Ack
		})
		if err := q.EnsureRetrying(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer runQueue(t, q)()
		cons, err := js.Consumer(t.Context(), "Q", "c")
		if err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			info, err := cons.Info(t.Context())
			if err != nil {
				return err
			}
			if info.NumAckPending != slots {
				return fmt.Errorf("%d messages delivered, want the %d slots' worth", info.NumAckPending, slots)
			}
			return nil
		})
		for range 5 { // five of the queue's polls pass without taking more
			info, err := cons.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != slots || info.NumPending != total-slots {
				t.Fatalf("delivered %d, waiting %d with every slot held; want %d and %d", info.NumAckPending, info.NumPending, slots, total-slots)
			}
			time.Sleep(100 * time.Millisecond) // observing that nothing happens, not synchronising
		}
		close(release)
		natstest.WaitFor(t, 10*time.Second, func() error {
			if n := handled.Load(); n != total {
				return fmt.Errorf("%d of %d handled", n, total)
			}
			return nil
		})
	})
}

// TestStoppedQueueLeavesNothingDelivered: a queue stopped while it waits
// for messages leaves none delivered to it: a message published as it
// stops is either handled by it or left to the next queue, which takes it
// at once, not after the ack wait (a minute). (Which of the two happens
// is the race this test runs; the server also sends nothing to a reply
// subject nobody listens on, so the queue's own hand-back is rarely what
// decides it.)
func TestStoppedQueueLeavesNothingDelivered(t *testing.T) {
	eachMode(t, func(t *testing.T, streamed bool) {
		js, ensure := queueStream(t, 0)
		var mu sync.Mutex
		handledBy := map[string]int{}
		newQueue := func(name string) *workqueue.WorkQueue {
			q := workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
				Slots: semaphore.NewWeighted(4), MaxFetchBatch: 4, PollWait: 2 * time.Second,
				Ensure: ensure, JS: streamedOn(js, streamed),
			}, func(context.Context, *workqueue.Delivery) workqueue.Decision {
				mu.Lock()
				handledBy[name]++
				mu.Unlock()
				return workqueue.Ack
			})
			if err := q.EnsureRetrying(t.Context()); err != nil {
				t.Fatal(err)
			}
			return q
		}
		first := newQueue("first")
		cons, err := js.Consumer(t.Context(), "Q", "c")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); first.Run(ctx, context.Background()) }()
		// The queue waits in the server for a message.
		natstest.WaitFor(t, 10*time.Second, func() error {
			info, err := cons.Info(t.Context())
			if err != nil {
				return err
			}
			if info.NumWaiting == 0 {
				return fmt.Errorf("no pull request waiting")
			}
			return nil
		})
		cancel()
		if _, err := js.Publish(t.Context(), "q.late", nil); err != nil {
			t.Fatal(err)
		}
		<-done
		mu.Lock()
		byFirst := handledBy["first"]
		mu.Unlock()
		if byFirst == 1 {
			return // handled before the stop took hold: nothing to hand back
		}
		defer runQueue(t, newQueue("second"))()
		natstest.WaitFor(t, 15*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if handledBy["second"] != 1 {
				return fmt.Errorf("handled %v; want the late message by the second queue", handledBy)
			}
			return nil
		})
	})
}
