package bustest

import (
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Withdrawer is the run's inbox as the loop sees it at a deadline.
func Withdrawer(t *testing.T, in loop.Inbox) loop.WithdrawInbox {
	t.Helper()
	wi, ok := in.(loop.WithdrawInbox)
	if !ok {
		t.Fatalf("%T is not a loop.WithdrawInbox", in)
	}
	return wi
}
