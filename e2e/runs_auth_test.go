package e2e

import (
	"strings"
	"testing"
	"time"
)

// An operator's command against the shipped deploy/nats-server.conf (issue
// 24, L1): "coordinator runs list" logs in with NATS_USER and
// NATS_PASSWORD, although the coordinator takes the password out of its
// environment at start; the connection reads it back from where it was
// taken to.
func TestRunsCommandLogsInWithTheEnvironment(t *testing.T) {
	t.Parallel()
	srv := startApprovalServer(t)
	for _, args := range [][]string{{"runs", "list"}, {"approvals", "list"}} {
		p := startProcEnv(t, strings.Join(args, "-"), approvalEnv(t, srv.ClientURL(), "operator"), bins.coordinator, args...)
		if code := p.wait(60 * time.Second); code != 0 || strings.Contains(p.log(), "Authorization") {
			t.Fatalf("coordinator %s as the operator: exit %d\n%s", strings.Join(args, " "), code, p.log())
		}
	}
}
