package admission

import (
	"context"
	"testing"
	"time"
)

// TestClassGate: the batch queue may pull only while no interactive call
// waits, or once every BatchEvery interactive calls (for one call); until
// the interactive queue's first pull, interactive calls are assumed to
// wait.
func TestClassGate(t *testing.T) {
	g := NewClassGate()
	if _, ok := g.Admit(); ok {
		t.Fatal("open before the interactive queue's first pull")
	}
	g.InteractivePulled(0, 0)
	if n, ok := g.Admit(); !ok || n != 0 {
		t.Fatalf("Admit after an empty interactive pull = %d %v, want open, no bound", n, ok)
	}
	g.Took(3)
	g.InteractivePulled(2, 5)
	if _, ok := g.Admit(); ok {
		t.Fatal("open while interactive calls wait")
	}
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		waited <- g.Wait(ctx)
	}()
	for range BatchEvery - 2 - 1 {
		g.InteractivePulled(1, 5)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) before batch's turn", err)
	default:
	}
	g.InteractivePulled(1, 5) // the BatchEvery-th interactive call since batch last took one
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if n, ok := g.Admit(); !ok || n != 1 {
		t.Fatalf("Admit on batch's turn = %d %v, want open for 1", n, ok)
	}
	g.Took(1)
	if _, ok := g.Admit(); ok {
		t.Fatal("open after batch took its turn while interactive calls wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); err == nil {
		t.Fatal("Wait on a shut gate returned nil for an ended context")
	}
}
