package agent_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzParse: any input is a definition that validates and round-trips, or
// a config.Error without a line break.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("testdata/support.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"name":"a","model":{"provider":"scripted","script":{"turns":[{"content":"hi"}]}}}`))
	f.Add([]byte(`{"name":"a","model":{"provider":"anthropic","name":"m"},"limits":{"tool_timeout":"1s"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := agent.Parse(data)
		if err != nil {
			var ce config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("not a config.Error: %v", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("line break in %q", err)
			}
			return
		}
		b, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agent.Parse(b); err != nil {
			t.Fatalf("the stored form is refused: %v\n%s", err, b)
		}
	})
}

// FuzzFromJournal: any journaled data is read as a valid agent name and
// revision, or not at all.
func FuzzFromJournal(f *testing.F) {
	f.Add([]byte(`{"name":"support","revision":7}`))
	f.Add([]byte(`{"name":"../x","revision":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, ok := agent.FromJournal([]loop.JournalEntry{{Kind: agent.EntryAgent, Data: data}})
		if ok && !protocol.ValidToken(r.Name) {
			t.Fatalf("read the name %q", r.Name)
		}
	})
}
