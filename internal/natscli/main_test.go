package natscli

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	Prepare()
	os.Exit(m.Run())
}
