package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderGet is the body of a STREAM.MSG.GET: a message by sequence, or
// the last on a subject.
type LeaderGet struct {
	Seq           uint64 `json:"seq,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
}

// GetFromLeader asks the leader of stream for the message get names, or
// jetstream.ErrMsgNotFound.
func GetFromLeader(ctx context.Context, js jetstream.JetStream, stream string, get LeaderGet) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(get)
	if err != nil {
		return nil, err
	}
	reply, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	m, err := DecodeMsgGet(reply.Data)
	if err != nil {
		return nil, fmt.Errorf("natsbus: a get of stream %s: %w", stream, err)
	}
	return m, nil
}

// DecodeMsgGet decodes the server's answer to a STREAM.MSG.GET: the
// message, jetstream.ErrMsgNotFound, or the server's *jetstream.APIError.
func DecodeMsgGet(data []byte) (*jetstream.RawStreamMsg, error) {
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("the answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		var err error
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("the headers of message %d: %w", m.Sequence, err)
		}
	}
	return m, nil
}

// APIPrefix returns the subject prefix of js's JetStream API requests.
func APIPrefix(js jetstream.JetStream) string {
	switch o := js.Options(); {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
