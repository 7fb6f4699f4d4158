package natscli

import (
	"os/exec"
	"strings"
	"testing"
)

func TestPathIsPinnedVersion(t *testing.T) {
	bin := Path(t)
	cmd := exec.Command(bin, "--version")
	cmd.Env = Env(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	if got := strings.TrimSpace(string(out)); got != Version {
		t.Errorf("nats --version = %q, want %q", got, Version)
	}
	if again := Path(t); again != bin {
		t.Errorf("second Path = %q, want the cached %q", again, bin)
	}
	// Install found the binary in place: the version check passes without
	// a build.
	if err := checkVersion(bin); err != nil {
		t.Errorf("checkVersion(%s): %v", bin, err)
	}
}
