package transcript_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/transcript"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Each testdata transcript was left by a run that stopped mid-round: the
// calc call is answered, the send call is not. Every format reads to the
// same neutral transcript.
func TestDecodeEachFormat(t *testing.T) {
	for _, c := range []struct {
		file string
		want transcript.Format
	}{
		{"chat.json", transcript.FormatChat},
		{"anthropic.json", transcript.FormatAnthropic},
		{"anthropic_request.json", transcript.FormatAnthropic},
		{"responses.json", transcript.FormatResponses},
		{"responses_request.json", transcript.FormatResponses},
	} {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			msgs, f, err := transcript.Decode(data)
			if err != nil || f != c.want {
				t.Fatalf("format %q err %v, want %q", f, err, c.want)
			}
			var got []string
			for _, m := range msgs {
				s := m.Role
				for _, tc := range m.ToolCalls {
					s += " " + tc.ID + ":" + tc.Function.Name
				}
				if m.Role == "tool" {
					s += " " + m.ToolCallID + "=" + m.Content
				}
				got = append(got, s)
			}
			want := "system|user|assistant calc_1:calculator send_1:send_email|tool calc_1=4"
			if c.file == "anthropic.json" { // the array form has no system prompt
				want = strings.TrimPrefix(want, "system|")
				msgs = append([]loop.Message{{Role: "system"}}, msgs...)
			}
			if strings.Join(got, "|") != want {
				t.Fatalf("got  %s\nwant %s", strings.Join(got, "|"), want)
			}
			if c.want == transcript.FormatAnthropic && msgs[3].Outcome != protocol.OutcomeOK {
				t.Fatalf("tool_result outcome %q", msgs[3].Outcome)
			}
			if args := msgs[2].ToolCalls[0].Function.Arguments; !strings.Contains(args, `"2+2"`) {
				t.Fatalf("arguments %q", args)
			}
		})
	}
}

func TestDecodeRefusesWithoutQuoting(t *testing.T) {
	const canary = "canary-7f3a"
	for _, in := range []string{
		`[{"role":"user","content":[{"type":"image","source":"` + canary + `"}]}]`,
		`{"input":[{"type":"web_search_call","id":"` + canary + `"}]}`,
		`"` + canary + `"`,
		`[]`,
	} {
		_, _, err := transcript.Decode([]byte(in))
		if !errors.Is(err, transcript.ErrUnknownFormat) || strings.Contains(err.Error(), canary) {
			t.Fatalf("Decode(%s) = %v", in, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"chat.json", "anthropic.json", "anthropic_request.json", "responses.json", "responses_request.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`[{"type":"function_call_output","call_id":"x","output":[{"type":"input_text","text":"a"}]}]`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"b","input":null}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, f, err := transcript.Decode(data)
		if err != nil {
			if msgs != nil || f != "" {
				t.Fatalf("error %v with messages", err)
			}
			return
		}
		if len(msgs) == 0 && f == transcript.FormatChat {
			t.Fatal("no messages")
		}
		for _, m := range msgs {
			switch m.Role {
			case "system", "user", "assistant", "tool":
			default:
				if f != transcript.FormatChat {
					t.Fatalf("role %q from %s", m.Role, f)
				}
			}
			if len(m.ToolCalls) > 0 && m.Role != "assistant" && f != transcript.FormatChat {
				t.Fatalf("%s message with calls", m.Role)
			}
		}
		_ = loop.Message{}
	})
}
