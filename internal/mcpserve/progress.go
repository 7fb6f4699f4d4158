package mcpserve

import (
	"context"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// toolProgressBuffer bounds the tool progress reports waiting to be sent
// to the client; more are dropped (the fleet bounds their rate already).
const toolProgressBuffer = 16

// withToolProgress returns ctx under which the progress the call's tool
// reports through the fleet reaches the client as notifications/progress.
// The fleet's sink never waits for the client: reports go through a small
// buffer that one goroutine drains until the call ends.
func (p *progress) withToolProgress(ctx context.Context) context.Context {
	if p == nil {
		return ctx
	}
	ch := make(chan string, toolProgressBuffer)
	go func() {
		for {
			select {
			case msg := <-ch:
				p.say(msg)
			case <-p.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return loop.WithProgress(ctx, func(r protocol.Progress) {
		select {
		case ch <- r.Message:
		default: // the client reads slower than the tool reports: dropped
		}
	})
}
