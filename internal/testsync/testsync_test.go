package testsync_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
)

func TestWaitForAndWaitUntilReturnOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	testsync.WaitFor(t, time.Minute, func() error {
		if n.Load() < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	testsync.WaitUntil(t, time.Minute, "three", func() bool { return n.Load() == 3 })
}

func TestBufferTakesConcurrentWritesAndHonoursItsLimit(t *testing.T) {
	var b testsync.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("kept %d bytes, want 800", got)
	}
	lim := testsync.Buffer{Limit: 10}
	for range 5 {
		if n, err := lim.Write([]byte("0123456789")); n != 10 || err != nil {
			t.Fatalf("Write = %d, %v; want 10, nil", n, err)
		}
	}
	if got := lim.String(); len(got) > 20 || !strings.HasPrefix(got, "0123456789") {
		t.Fatalf("bounded buffer kept %q, want at most 20 bytes", got)
	}
}
