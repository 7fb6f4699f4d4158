package workerbus

import (
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWantsStarted: which calls a worker sends a started notice for, by
// what the call's coordinator asked (absent: a coordinator older than the
// header, which needs every call's).
func TestWantsStarted(t *testing.T) {
	tests := []struct {
		header     string
		idempotent bool
		want       bool
	}{
		{protocol.StartedNoticeNone, false, false},
		{protocol.StartedNoticeNone, true, false},
		{protocol.StartedNoticeNonIdempotent, false, true},
		{protocol.StartedNoticeNonIdempotent, true, false},
		{"", false, true},
		{"", true, true},
		{"something newer", true, true},
	}
	for _, tt := range tests {
		if got := wantsStarted(tt.header, tt.idempotent); got != tt.want {
			t.Errorf("wantsStarted(%q, idempotent %v) = %v, want %v", tt.header, tt.idempotent, got, tt.want)
		}
	}
}

// TestRegisterDeliveriesOfOneCall: a cancel reaches every delivery of a
// call registered here, including two running at once, and none once
// each has unregistered, whichever order they end in.
func TestRegisterDeliveriesOfOneCall(t *testing.T) {
	for _, firstEndsFirst := range []bool{true, false} {
		w := &Worker{running: make(map[callRef]runningCall)}
		run, key := protocol.NewRunID(), protocol.NewCallKey()
		ref := callRefOf(run, key)
		var a, b int
		regA := w.register(run, key, func(error) { a++ })
		regB := w.register(run, key, func(error) { b++ })
		if n := w.running[ref].cancel(errCancelRequested); n != 2 || a != 1 || b != 1 {
			t.Fatalf("cancel reached %d deliveries (a %d, b %d), want both once", n, a, b)
		}
		gone, left := regA, regB
		if !firstEndsFirst {
			gone, left = regB, regA
		}
		w.unregister(gone)
		if n := w.running[ref].cancel(errCancelRequested); n != 1 || a+b != 3 {
			t.Fatalf("after one unregistered, cancel reached %d deliveries (a %d, b %d), want the other one", n, a, b)
		}
		if gone == regA && b != 2 || gone == regB && a != 2 {
			t.Fatalf("after one unregistered, the cancel reached it again (a %d, b %d)", a, b)
		}
		w.unregister(left)
		if _, ok := w.running[ref]; ok || len(w.running) != 0 {
			t.Fatalf("running = %v after both unregistered, want empty", w.running)
		}
		w.unregister(left) // twice: nothing to remove
	}
}
