package natsbus_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestPollsDropNoCallOnASlowLink: a worker whose link to the server is
// slow (20ms each way, more than a tenth of its poll) still takes every
// call on its first delivery. A poll that ended in the client while the
// server could still deliver to it would drop the calls the server sent in
// its last moments, and the server would send them again only after the
// ack wait.
func TestPollsDropNoCallOnASlowLink(t *testing.T) {
	f := newFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	nc, err := nats.Connect(newSlowLink(t, f.srv.ClientURL(), 20*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A long ack wait: a dropped call comes back only after the test.
	w, err := natsbus.NewWorker(nc, js, f.subjects, h, natsbus.WorkerConfig{Name: "far", Concurrency: 1,
		PollWait: 100 * time.Millisecond, AckWait: time.Minute, Logger: f.log.Logger(), NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.waitConsumers(t, h)

	// Calls published one at a time, each a little later in a poll than
	// the last, so some reach the server as a poll ends.
	d, run, in := f.openRun(t)
	const n = 40
	for i := range n {
		call := newCall(run, "echo", `{"text":"e"}`, 30*time.Second)
		if err := d.Publish(ctx(t), call); err != nil {
			t.Fatal(err)
		}
		r, ok := awaitResult(in, call.CallKey, 10*time.Second)
		if !ok {
			t.Fatalf("call %d was not answered: a poll dropped it", i)
		}
		if r.Outcome != protocol.OutcomeOK {
			t.Fatalf("call %d: %+v", i, r)
		}
		pause(time.Duration(i) * 7 * time.Millisecond % (150 * time.Millisecond))
	}
	if info := f.consumerInfo(t, "echo"); info.Delivered.Consumer != n || info.NumAckPending != 0 {
		t.Fatalf("%d deliveries of %d calls, %d unacknowledged; want one each, all acknowledged",
			info.Delivered.Consumer, n, info.NumAckPending)
	}
}

// awaitResult reads in until key's result arrives, or reports false after
// within.
func awaitResult(in loop.Inbox, key protocol.CallKey, within time.Duration) (protocol.Result, bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				return protocol.Result{}, false
			}
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result, true
			}
		case <-timer.C:
			return protocol.Result{}, false
		}
	}
}

// pause spaces out what a test sends; it synchronises nothing.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// newSlowLink forwards a loopback port to the server at url, delaying
// every byte by latency in each direction, and returns the port's URL.
func newSlowLink(t *testing.T, url string, latency time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(url, "nats://")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { delayCopy(up, c, latency) })
			wg.Go(func() { delayCopy(c, up, latency) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "nats://" + ln.Addr().String()
}

// delayCopy copies src to dst, each chunk latency after it was read, in
// order.
func delayCopy(dst, src net.Conn, latency time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(latency), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			pause(d)
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range q {
	}
}
