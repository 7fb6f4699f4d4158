package workqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

// refusedQueue is a streamed queue whose consumer (MaxWaiting 1) already
// has its one waiting request taken by another client, so the server
// refuses every request the queue makes to wait ("409 Exceeded
// MaxWaiting"), and the counts of what the queue sent and was refused.
type refusedQueue struct {
	q       *workqueue.WorkQueue
	js      jetstream.JetStream
	other   *nats.Conn         // the other client
	blocker *nats.Subscription // the other client's waiting request

	sent    atomic.Int64 // the queue's requests seen on the consumer's MSG.NEXT subject
	refused atomic.Int64 // the "Exceeded MaxWaiting" answers it got
	handled atomic.Int64 // the messages its handler acknowledged
}

// newRefusedQueue makes a refusedQueue on a fresh server: stream Q, empty,
// with consumer "c". The queue is not running yet.
func newRefusedQueue(t *testing.T) *refusedQueue {
	t.Helper()
	srv, js := queueServer(t)
	// The other client's inboxes are apart from the queue's, which a
	// subscription below watches: it would keep the other client's
	// request wanted after that client unsubscribed.
	r := &refusedQueue{js: js, other: natstest.Connect(t, srv, nats.CustomInboxPrefix("_OTHER"))}
	// As many slots as one request may take: the queue's first request, a
	// no-wait one, holds them all until the server's answer, so it is the
	// only one before the queue goes idle and asks to wait.
	r.q = workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
		Slots: semaphore.NewWeighted(4), MaxFetchBatch: 4, PollWait: time.Second, JS: js,
		Ensure: func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, "Q", jetstream.ConsumerConfig{
				Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxWaiting: 1,
			})
		},
	}, func(context.Context, *workqueue.Delivery) workqueue.Decision {
		r.handled.Add(1)
		return workqueue.Ack
	})
	if err := r.q.EnsureRetrying(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The other client: one request waiting for an hour takes the
	// consumer's one waiting place.
	other := r.other
	next := jetstream.DefaultAPIPrefix + "CONSUMER.MSG.NEXT.Q.c"
	inbox := other.NewInbox()
	var err error
	if r.blocker, err = other.SubscribeSync(inbox); err != nil {
		t.Fatal(err)
	}
	if err := other.PublishRequest(next, inbox, []byte(fmt.Sprintf(`{"batch":1,"expires":%d}`, time.Hour))); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(t.Context(), "Q", "c")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err := cons.Info(t.Context())
		if err != nil {
			return err
		}
		if info.NumWaiting != 1 {
			return fmt.Errorf("%d requests waiting, want the other client's", info.NumWaiting)
		}
		return nil
	})

	// What the queue sends, and the refusals it hears back, seen from
	// aside by plain subscriptions.
	if _, err := other.Subscribe(next, func(m *nats.Msg) {
		if m.Reply != inbox {
			r.sent.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Subscribe(nats.InboxPrefix+">", func(m *nats.Msg) {
		if m.Header.Get("Status") == "409" && strings.Contains(m.Header.Get("Description"), "Exceeded MaxWaiting") {
			r.refused.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// requestsAllowed is how many requests a queue refused from its second
// request on may have sent within elapsed of its start if it pauses
// natsbus.Backoff(n) after its n-th refusal in a row: its first request (a
// no-wait one, which finds nothing and sends the queue idle), its first
// request to wait (refused), and one more after each pause that fits
// within elapsed.
func requestsAllowed(elapsed time.Duration) int {
	allowed, paused := 2, time.Duration(0)
	for n := 1; ; n++ {
		if paused += natsbus.Backoff(n); paused > elapsed {
			return allowed
		}
		allowed++
	}
}

// TestStreamedQueuePausesWhileRefused: a streamed queue whose requests the
// server refuses (409 Exceeded MaxWaiting) pauses before each next one,
// the pause growing while refusals follow one another: in the time since
// it started, it sent no more requests than natsbus.Backoff's growing
// schedule lets through (it would send thousands asking again at once,
// and about twice as many as allowed pausing Backoff(1) each time). No
// pause is shorter than its Backoff, so a queue that pauses as it should
// stays within the allowance however slowly the machine runs it: the
// bound needs no margin.
func TestStreamedQueuePausesWhileRefused(t *testing.T) {
	r := newRefusedQueue(t)
	start := time.Now()
	defer runQueue(t, r.q)()
	const refusals = 10
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := r.refused.Load(); n < refusals {
			return fmt.Errorf("%d of the queue's requests refused, want %d", n, refusals)
		}
		return nil
	})
	sent := r.sent.Load()
	elapsed := time.Since(start) // read after the count: every request counted went out within it
	if allowed := requestsAllowed(elapsed); sent > int64(allowed) {
		t.Fatalf("the queue sent %d requests in %v while refused; its backoff allows at most %d", sent, elapsed, allowed)
	}
	t.Logf("%d requests, %d refused, in %v", sent, r.refused.Load(), elapsed)
}

// TestStreamedQueueRecoversAfterRefusals: once the server stops refusing
// a streamed queue's requests (the other client's request that held the
// consumer's one waiting place is gone), the queue takes and handles the
// messages published then.
func TestStreamedQueueRecoversAfterRefusals(t *testing.T) {
	r := newRefusedQueue(t)
	defer runQueue(t, r.q)()
	const refusals = 3
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := r.refused.Load(); n < refusals {
			return fmt.Errorf("%d of the queue's requests refused, want %d", n, refusals)
		}
		return nil
	})
	// The server has the unsubscription before the first message, which
	// would otherwise go to the gone request.
	if err := r.blocker.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := r.other.Flush(); err != nil {
		t.Fatal(err)
	}
	const total = 5
	for i := range total {
		if _, err := r.js.Publish(t.Context(), fmt.Sprintf("q.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := r.handled.Load(); n != total {
			return fmt.Errorf("%d of %d messages handled after the refusals stopped", n, total)
		}
		return nil
	})
}
