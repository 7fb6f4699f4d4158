package dispatch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestCallMsgSubjects: each call's message goes on its tool's subject
// under its run's route at the time, with its own tool's reply subject,
// whatever the run's calls before it were to: another tool, the same
// tool, or the same tool before the run's route changed.
func TestCallMsgSubjects(t *testing.T) {
	var subjects protocol.Subjects
	d := NewDispatcher(nil, nil, subjects, DispatcherConfig{})
	run := protocol.NewRunID()
	d.inboxes.Store(run, &Inbox{run: run})
	batch := admission.Route{Client: "acme", Class: protocol.ClassBatch}
	steps := []struct {
		tool  protocol.ToolName
		route *admission.Route // set before the call; nil: unchanged
	}{
		{tool: "echo"}, {tool: "echo"}, {tool: "sleep"}, {tool: "echo"},
		{tool: "echo", route: &batch}, {tool: "sleep"}, {tool: "sleep"},
		{tool: "sleep", route: &admission.Route{}},
	}
	route := admission.Route{Client: protocol.DefaultClient, Class: protocol.ClassInteractive}
	for i, st := range steps {
		if st.route != nil {
			if _, err := d.Route(run, *st.route); err != nil {
				t.Fatal(err)
			}
			route = d.route(run)
		}
		o := loop.Outgoing{Call: protocol.Call{
			V: protocol.Version, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "call_1",
			Tool: st.tool, Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute), Attempt: 1,
		}}
		msg, err := d.callMsg(context.Background(), &o)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantSubject, _ := subjects.Call(st.tool, route.Class, route.Client)
		wantReply, _ := subjects.Result(run, st.tool)
		if msg.Subject != wantSubject || msg.Header.Get(protocol.HeaderReplyTo) != wantReply {
			t.Errorf("call %d to %s: subject %q, reply-to %q; want %q, %q", i, st.tool, msg.Subject, msg.Header.Get(protocol.HeaderReplyTo), wantSubject, wantReply)
		}
	}
}
