package approval

import (
	"os"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natscli"
)

// TestMain builds the nats CLI before any test starts a deadline.
func TestMain(m *testing.M) {
	natscli.Prepare()
	os.Exit(m.Run())
}
