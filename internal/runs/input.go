package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrInputRefused is wrapped by the error of an input the run's
// coordinator refused (the reply's error says why), or the server did
// (the sender may not send to that run).
var ErrInputRefused = errors.New("the input was refused")

// ErrNotRunning is returned by [Input] when no coordinator runs the run
// now: it ended, it waits for a coordinator (parked, or between two),
// or it is not the sender's.
var ErrNotRunning = errors.New("no coordinator runs the run now (it ended, waits to be taken, or is not yours)")

// Input sends client's new user message to its run in flight, in mode
// (protocol.RunInputEnqueue or RunInputInterrupt), and waits for the
// coordinator running it to accept it, or ctx to end (give ctx a
// deadline): [ErrNotRunning] then, or when no coordinator runs it. A
// message the server refuses to carry (a subject the sender may not
// publish) or the coordinator refuses is [ErrInputRefused].
func Input(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, client string, run protocol.RunID, mode, content string) error {
	in := protocol.RunInput{V: protocol.Version, RunID: run, Mode: mode, Content: content}
	if err := in.Validate(); err != nil {
		return err
	}
	data, err := protocol.Encode(&in)
	if err != nil {
		return err
	}
	subject, err := subjects.RunInput(client, run)
	if err != nil {
		return err
	}
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	before := nc.LastError()
	if err := nc.PublishRequest(subject, sub.Subject, data); err != nil {
		return fmt.Errorf("sending the input: %w", err)
	}
	// A permission violation comes back asynchronously: a flush round
	// trip lets the connection's error handler see it.
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("sending the input: %w", err)
	}
	if err := nc.LastError(); err != nil && err != before {
		return fmt.Errorf("%w by the server: %w", ErrInputRefused, err)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return ErrNotRunning
	}
	if m.Header.Get("Status") == "503" {
		return ErrNotRunning
	}
	var reply protocol.RunInputReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.RunID != run {
		return fmt.Errorf("%w: the coordinator's answer does not decode", ErrInputRefused)
	}
	if !reply.Accepted {
		why := "no reason given"
		if reply.Error != nil {
			why = reply.Error.Code + ": " + reply.Error.Message
		}
		return fmt.Errorf("%w: %s", ErrInputRefused, why)
	}
	return nil
}
