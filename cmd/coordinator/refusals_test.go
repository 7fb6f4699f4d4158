package main

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
)

// TestRefusedCommandNamesTheUserItNeeds: an operator's command, or
// provision, run as a user the server refuses (here the client, who may publish nothing) fails
// with the server's refusal and the user to run it as, not with a timeout
// that says nothing about permissions.
func TestRefusedCommandNamesTheUserItNeeds(t *testing.T) {
	s := natstest.StartWithConfig(t, `authorization { users: [
  {user: client, password: "tf-client", permissions: {publish: {deny: ">"}, subscribe: {allow: "_INBOX_client.>"}}}
] }`)
	t.Setenv("NATS_URL", s.ClientURL())
	t.Setenv("NATS_USER", "client")
	t.Setenv("NATS_PASSWORD", "tf-client")
	t.Setenv("TMPDIR", t.TempDir())
	for _, tc := range []struct {
		args []string
		need string
	}{
		{[]string{"approvals", "list"}, "run it as operator"},
		{[]string{"runs", "list"}, "run it as operator"},
		{[]string{"agents", "ls"}, "run it as operator or admin"},
		{[]string{"provision"}, "run it as admin"},
	} {
		var out, errb testsync.Buffer
		code := run(tc.args, &out, &errb)
		stderr := errb.String()
		if code == exitOK || !strings.Contains(stderr, "Permissions Violation") || !strings.Contains(stderr, "NATS user client may not do this; "+tc.need) {
			t.Errorf("%v as client: exit %d, stderr:\n%s\nwant a failure naming the refusal and %q", tc.args, code, stderr, tc.need)
		}
	}
}
