package workerbus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/tracing/tracingtest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// traceMsg is a delivered call as startCallTrace reads it: subject,
// headers and metadata.
type traceMsg struct {
	jetstream.Msg
	h  nats.Header
	md *jetstream.MsgMetadata
}

func (m *traceMsg) Subject() string { return "toolfleet.call.echo" }

func (m *traceMsg) Headers() nats.Header { return m.h }

func (m *traceMsg) Metadata() (*jetstream.MsgMetadata, error) { return m.md, nil }

func newTraceMsg() *traceMsg {
	return &traceMsg{
		h:  nats.Header{"Nats-Msg-Id": {"x"}, "traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: time.Now()},
	}
}

// traceCall runs a delivery's spans as the worker does for a call that
// runs and answers.
func traceCall(m jetstream.Msg, c protocol.Call) {
	ct := startCallTrace(context.Background(), &toolConsumer{name: "echo", spanName: callSpanName("echo")}, m)
	endValidation := ct.child("validation")
	endValidation("")
	ct.callID = c.CallID
	ct.record(CallEvent{Kind: CallStarted, Tool: "echo", RunID: c.RunID, CallKey: c.CallKey, Attempt: 1})
	endExecution := ct.child("execution")
	endExecution("")
	endPublish := ct.child("result publish")
	ct.record(CallEvent{Kind: CallFinished, Tool: "echo", RunID: c.RunID, CallKey: c.CallKey, Attempt: 1, Outcome: protocol.OutcomeOK})
	endPublish("")
	ct.end()
}

func benchTraceCall() protocol.Call {
	return protocol.Call{RunID: protocol.NewRunID(), CallKey: protocol.NewCallKey(), CallID: "call_1", Tool: "echo"}
}

// BenchmarkCallTraceOff is a call's worker spans with no tracer provider
// installed.
func BenchmarkCallTraceOff(b *testing.B) {
	m, c := newTraceMsg(), benchTraceCall()
	b.ReportAllocs()
	for b.Loop() {
		traceCall(m, c)
	}
}

// BenchmarkCallTraceOn is the same with an SDK provider recording every
// span.
func BenchmarkCallTraceOn(b *testing.B) {
	exp, _ := tracingtest.Install(b)
	m, c := newTraceMsg(), benchTraceCall()
	b.ReportAllocs()
	for b.Loop() {
		traceCall(m, c)
		exp.Reset()
	}
}
