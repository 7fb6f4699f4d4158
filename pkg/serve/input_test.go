package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// TestServeRunInput: from the public packages — while a served run's
// model thinks, its client's Enqueue is accepted and the model's next
// request ends with the message; a message on the run's input subject
// that is not an input of the run is refused with why, and counted; once
// the run ended, Enqueue is ErrNotRunning.
func TestServeRunInput(t *testing.T) {
	thinking, release := make(chan struct{}), make(chan struct{})
	var second []loop.Message
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		tools := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		if tools == 0 {
			close(thinking)
			<-release
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "calculator", `{"expression": "6 * 7"}`)}}}, nil
		}
		second = req.Messages
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "42"}}, nil
	})
	reg := prometheus.NewRegistry()
	fleet := fleettest.Start(t, fleettest.Config{
		Tools: []harness.Tool{harness.Calculator()},
		Serve: &serve.Config{Name: "inputs", Model: model, ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond, Registerer: reg},
	})
	nc := fleet.ConnectClient()
	c, err := client.New(nc, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "What is 6 * 7?"})
	if err != nil {
		t.Fatal(err)
	}
	<-thinking
	if err := c.Enqueue(ctx, run.ID, "show your work"); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	subject, _ := protocol.Subjects{}.RunInput(c.Name(), run.ID)
	for _, body := range []string{`garbage`, `{"v":1,"run_id":"` + string(run.ID) + `","mode":"shout","content":"x"}`,
		`{"v":1,"run_id":"another","mode":"enqueue","content":"x"}`} {
		m, err := nc.RequestWithContext(ctx, subject, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		var reply protocol.RunInputReply
		if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Accepted || reply.Error == nil {
			t.Fatalf("%s: reply %s, want refused with why", body, m.Data)
		}
	}
	if n := counterValue(t, reg, "toolfleet_coordinator_refused_messages_total", "run_input"); n != 3 {
		t.Fatalf("refused run inputs counted %v, want 3", n)
	}
	close(release)
	res, err := c.Wait(ctx, run)
	if err != nil || res.Answer != "42" {
		t.Fatalf("result %+v (%v)", res, err)
	}
	if last := second[len(second)-1]; last.Role != "user" || last.Content != "show your work" {
		t.Fatalf("the model's next request ends with %+v, want the client's message", last)
	}
	late, lcancel := context.WithTimeout(ctx, 2*time.Second)
	defer lcancel()
	if err := c.Enqueue(late, run.ID, "too late"); !errors.Is(err, client.ErrNotRunning) {
		t.Fatalf("Enqueue to an ended run: %v, want ErrNotRunning", err)
	}
}
