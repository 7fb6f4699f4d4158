package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ImageBinaries returns the directory of the images' binaries (coordinator,
// toolworker), built once as the Dockerfile builds them; package
// deploy_test, which builds them, sets it.
var ImageBinaries func(t *testing.T) string

// coordinatorAs runs the image's coordinator binary with args as user of
// the shipped configuration on the server at url — its password and inbox
// prefix in the environment, as docs/setup.md has an operator run it — and
// returns its exit status, stdout and stderr.
func coordinatorAs(t *testing.T, url, user string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	c := exec.CommandContext(t.Context(), filepath.Join(ImageBinaries(t), "coordinator"), args...)
	c.Env = append(os.Environ(), "NATS_URL="+url, "NATS_USER="+user, "NATS_PASSWORD="+passwords[user],
		"NATS_INBOX_PREFIX="+inboxOf(user))
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("coordinator %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}
