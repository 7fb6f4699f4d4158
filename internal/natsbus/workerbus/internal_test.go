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
