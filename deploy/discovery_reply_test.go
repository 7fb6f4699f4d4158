package deploy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// An attack (issue 24): a requester that may ask the workers' discovery
// service (coordinator, operator) names a stream's subject as the reply
// subject, so that a worker would publish its answer there — into the
// audit log as a "decision", or as a call of another tool. Workers answer
// on the requesters' own inboxes only (no allow_responses, which also
// overrides the worker's own denies): the answer is refused, nothing
// arrives on the foreign subject, and a request with the requester's inbox
// is answered.
func TestHostileDiscoveryReplySubject(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	worker := connectAs(t, s, "worker")
	svc, err := micro.AddService(worker.nc, micro.Config{Name: "toolworker", Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	op := connectAs(t, s, "operator")
	coord := connectAs(t, s, "coordinator")
	for _, tc := range []struct {
		requester, observer client
		target              string
	}{
		{coord, op, "fleet.approval.decision.run1.key1"}, // the operator may watch decisions
		{op, coord, "fleet.call.deploy"},                 // the coordinator may watch calls
	} {
		seen, err := tc.observer.nc.SubscribeSync(tc.target) // the literal interest a reply needs
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.observer.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := tc.requester.nc.PublishRequest("$SRV.INFO.toolworker", tc.target, nil); err != nil {
			t.Fatal(err)
		}
		var arrived *nats.Msg
		natstest.WaitFor(t, 30*time.Second, func() error {
			if m, err := seen.NextMsg(10 * time.Millisecond); err == nil {
				arrived = m
				return nil
			}
			err := worker.nc.LastError()
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("Publish to %q", tc.target)) {
				return nil
			}
			return fmt.Errorf("the worker's answer on %s neither refused nor delivered (last error %v)", tc.target, err)
		})
		if arrived != nil {
			t.Fatalf("a discovery answer arrived on %s: %.200s", tc.target, arrived.Data)
		}
		seen.Unsubscribe()
	}
	for name, requester := range map[string]client{"coordinator": coord, "operator": op} {
		if _, err := requester.nc.Request("$SRV.INFO.toolworker", nil, 10*time.Second); err != nil {
			t.Errorf("%s asking on its own inbox: %v", name, err)
		}
	}
}
