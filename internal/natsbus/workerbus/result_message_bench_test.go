package workerbus

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// published keeps a benchmark's message, as the client's publish does.
var published *nats.Msg

// BenchmarkResultMessage is the message of one result as the worker
// publishes it alone: its subject, dedup id and version.
func BenchmarkResultMessage(b *testing.B) {
	w := &Worker{}
	run, key := protocol.NewRunID(), protocol.NewCallKey()
	subject, _ := w.subjects.Result(run, "echo")
	data := []byte(`{"v":1}`)
	b.ReportAllocs()
	for b.Loop() {
		published = w.resultMessage(subject, protocol.ResultMsgID("echo", key), data)
	}
}
