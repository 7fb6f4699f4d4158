package client

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestRequestClass: a request's class travels in its body, and a class
// that is neither interactive nor batch is refused before anything is
// sent.
func TestRequestClass(t *testing.T) {
	data, err := Request{Prompt: "hi", Class: protocol.ClassBatch}.body()
	if err != nil {
		t.Fatal(err)
	}
	req, err := protocol.DecodeRunRequest(data, 0)
	if err != nil || req.Class != "batch" {
		t.Fatalf("decoded class %q (%v), want batch", req.Class, err)
	}
	if _, err := (Request{Prompt: "hi", Class: "urgent"}).body(); !errors.Is(err, protocol.ErrInvalidField) {
		t.Fatalf("class urgent: %v, want invalid field", err)
	}
}
