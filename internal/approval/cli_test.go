package approval

import (
	"bytes"
	"fmt"
	"github.com/nats-io/nats-server/v2/server"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestOperatorWithNatsCLI is the documented operator flow, with the real
// nats CLI: watch requests with "nats sub", answer with "nats pub".
func TestOperatorWithNatsCLI(t *testing.T) {
	bin := natscli.Path(t)
	tests := []struct {
		name string
		body func(digest string) string
		want loop.Decision
	}{
		{
			name: "approve",
			body: func(d string) string { return `{"digest":"` + d + `","approved":true,"approver":"alice"}` },
			want: loop.Decision{Approved: true, Approver: "alice"},
		},
		{
			name: "deny",
			body: func(d string) string {
				return `{"digest":"` + d + `","approved":false,"reason":"not today","approver":"bob"}`
			},
			want: loop.Decision{Reason: "not today", Approver: "bob"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, GateConfig{})
			env := append(natscli.Env(t), "NATS_URL="+f.srv.ClientURL())

			// nats sub 'fleet.approval.request.>' --count 1 --raw
			var subOut, subErr testsync.Buffer
			sub := exec.CommandContext(t.Context(), bin, "sub", "fleet.approval.request.>", "--count", "1", "--raw")
			sub.Env, sub.Stdout, sub.Stderr = env, &subOut, &subErr
			if err := sub.Start(); err != nil {
				t.Fatal(err)
			}
			subDone := make(chan error, 1)
			go func() { subDone <- sub.Wait() }()
			testsync.WaitFor(t, 20*time.Second, func() error {
				cz, err := f.srv.Connz(&server.ConnzOptions{Subscriptions: true})
				if err != nil {
					return err
				}
				for _, c := range cz.Conns {
					if slices.Contains(c.Subs, "fleet.approval.request.>") {
						return nil
					}
				}
				return fmt.Errorf("nats sub has not subscribed yet: %s", subErr.String())
			})

			req := newRequest(t, "run1", "deploy", `{"env":"prod"}`, 20*time.Second)
			res := f.approveAsync(t.Context(), req)
			select {
			case err := <-subDone:
				if err != nil {
					t.Fatalf("nats sub: %v\n%s", err, subErr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("nats sub saw no request; stderr: %s", subErr.String())
			}
			seen, err := protocol.DecodeApprovalRequest(bytes.TrimSpace([]byte(subOut.String())), 0)
			if err != nil {
				t.Fatalf("nats sub --raw printed %q: %v", subOut.String(), err)
			}
			if seen.CallKey != req.CallKey || seen.Digest != digestOf(t, req) || string(seen.Arguments) != `{"env":"prod"}` {
				t.Fatalf("request seen by the operator: %+v", seen)
			}

			// nats pub fleet.approval.decision.<run>.<key> '<json>'
			pub := exec.CommandContext(t.Context(), bin, "pub", seen.DecisionSubject, tt.body(seen.Digest))
			pub.Env = env
			if out, err := pub.CombinedOutput(); err != nil {
				t.Fatalf("nats pub: %v\n%s", err, out)
			}
			r := recv(t, res, 20*time.Second)
			if r.err != nil || sansProof(t, r.d) != tt.want {
				t.Fatalf("Decision=%+v, %v; want %+v", r.d, r.err, tt.want)
			}
			if !strings.HasPrefix(seen.DecisionSubject, "fleet.approval.decision.run1.") {
				t.Errorf("DecisionSubject=%q", seen.DecisionSubject)
			}
		})
	}
}
