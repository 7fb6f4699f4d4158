package natsbus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestNeverTTLOutlivesMaxAge measures what nats-server does with a record
// sent with "Nats-TTL: never" to a stream that takes per-message TTLs, as
// the shared starts stream does: the stream's MaxAge removes a record
// without a TTL, and keeps the one that says never (filestore's
// expireMsgs skips a negative TTL), so such a record stays until someone
// removes it. docs/security.md rests the shared starts stream's bound on
// this: only writers trusted for every shared tool may write it, and a
// tool whose workers are not gets streams that take no TTL.
func TestNeverTTLOutlivesMaxAge(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "TTL_PROBE", Subjects: []string{"probe.>"}, Storage: jetstream.FileStorage,
		MaxAge: time.Second, AllowMsgTTL: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for subj, ttl := range map[string]string{"probe.none": "", "probe.never": "never"} {
		msg := nats.NewMsg(subj)
		if ttl != "" {
			msg.Header.Set(jetstream.MsgTTLHeader, ttl)
		}
		if _, err := js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatalf("storing %s: %v", subj, err)
		}
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if _, err := st.GetLastMsgForSubject(t.Context(), "probe.none"); err == nil {
			return errors.New("the record without a TTL is still stored")
		}
		return nil
	})
	if _, err := st.GetLastMsgForSubject(t.Context(), "probe.never"); err != nil {
		t.Errorf("the record with Nats-TTL never, once MaxAge removed the other: %v, want still stored", err)
	}
}
