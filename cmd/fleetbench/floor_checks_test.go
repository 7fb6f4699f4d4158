package main

import (
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestFloorChecks runs one call through the floor's checks: the requester's
// call, the worker's run in the harness, the requester's decode of the
// result; and a call the worker must refuse.
func TestFloorChecks(t *testing.T) {
	c, err := newFloorChecks()
	if err != nil {
		t.Fatal(err)
	}
	h, err := newFloorHarness(zerolog.New(io.Discard).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	key := protocol.NewCallKey()
	call, err := c.call("r1", key, echoArgs, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	res, err := runChecked(t.Context(), h, call)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.result(res)
	if err != nil || got != string(key) {
		t.Fatalf("result answers %q, %v; want %q", got, err, key)
	}
	if _, err := c.call("r1", key, `{"text":1}`, time.Now().Add(time.Minute)); err == nil {
		t.Error("a call with arguments against the schema was encoded")
	}
	if _, err := runChecked(t.Context(), h, []byte(`{"v":1}`)); err == nil {
		t.Error("the worker ran a call that is not one")
	}
	late, err := c.call("r1", key, echoArgs, time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res, err = runChecked(t.Context(), h, late); err != nil {
		t.Fatal(err)
	}
	if _, err := c.result(res); err == nil {
		t.Error("an expired call's result counted as answered")
	}
}

// BenchmarkFloorChecks is the CPU the checks add to one floor call, with no
// transport: what the "floor with the fleet's checks" rows spend beyond
// the floor's.
func BenchmarkFloorChecks(b *testing.B) {
	c, err := newFloorChecks()
	if err != nil {
		b.Fatal(err)
	}
	h, err := newFloorHarness(zerolog.New(io.Discard).Level(zerolog.InfoLevel))
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		key := protocol.NewCallKey()
		call, err := c.call("r1", key, echoArgs, deadline)
		if err != nil {
			b.Fatal(err)
		}
		res, err := runChecked(b.Context(), h, call)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.result(res); err != nil {
			b.Fatal(err)
		}
	}
}
