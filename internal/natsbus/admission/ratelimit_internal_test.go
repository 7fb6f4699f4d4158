package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Limiters of one tool on separate connections (three workers) share one
// bucket: together they never reserve more than burst + rate × t slots,
// whatever their contention, and a slot beyond maxWait is refused with
// the time to try again. Not a timing assertion: the bound is computed
// from the test's own measured span.
func TestRateLimitersShareOneBucket(t *testing.T) {
	srv := natstest.Start(t)
	subjects := protocol.Subjects{}
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := natsbus.EnsureStreams(ctx, js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	lim := protocol.RateLimit{Rate: 50, Burst: 5}
	const perWorker = 40
	var (
		mu       sync.Mutex
		reserved int
		refused  int
		wg       sync.WaitGroup
	)
	begin := time.Now()
	var last time.Time
	for range 3 {
		js, err := jetstream.New(natstest.Connect(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, subjects.LimitsBucket())
		if err != nil {
			t.Fatal(err)
		}
		l := NewRateLimiter("echo", lim)
		for range 4 { // concurrent calls on one worker
			wg.Go(func() {
				for range perWorker / 4 {
					wait, retry, err := l.Reserve(ctx, kv, *l.Current(), 200*time.Millisecond)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if retry > 0 {
						refused++
						if retry > time.Second {
							t.Errorf("retry after %v, want <= 1s at 50/s", retry)
						}
					} else {
						reserved++
						if at := time.Now().Add(wait); at.After(last) {
							last = at
						}
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	span := last.Sub(begin)
	bound := lim.Burst + int(lim.Rate*span.Seconds()) + 1
	t.Logf("%d reserved (bound %d over %v), %d refused", reserved, bound, span.Round(time.Millisecond), refused)
	if reserved > bound {
		t.Fatalf("%d slots reserved over %v, limit %d", reserved, span, bound)
	}
	if reserved+refused != 3*perWorker {
		t.Fatalf("%d reserved + %d refused, want %d", reserved, refused, 3*perWorker)
	}
	if reserved < lim.Burst {
		t.Fatalf("only %d reserved, want at least the burst %d", reserved, lim.Burst)
	}
}

// FuzzDecodeTAT: whatever a bucket holds, its state is an empty bucket or
// a time no further ahead than a reservation can put it.
func FuzzDecodeTAT(f *testing.F) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC).UnixNano()
	f.Add([]byte("1796342400000000000"))
	f.Add([]byte("9223372036854775807"))
	f.Add([]byte("-1"))
	f.Add([]byte("+12"))
	f.Add([]byte(""))
	f.Add([]byte("１２"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tat := decodeTAT(data, now)
		if tat < 0 || tat > now+int64(maxTATAhead) {
			t.Fatalf("decodeTAT(%q) = %d", data, tat)
		}
	})
}
