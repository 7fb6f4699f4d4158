package approval

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzCheck: whatever bytes arrive on a decision subject, the gate accepts
// them only as a decision that says true or false and carries the request's
// digest.
func FuzzCheck(f *testing.F) {
	req := protocol.ApprovalRequest{V: 1, RunID: "r", CallKey: "k", Tool: "t", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Hour)}
	req.Digest, _ = protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
	g := NewGate(nil, nil, protocol.Subjects{}, GateConfig{})
	f.Add([]byte(`{"digest":"` + req.Digest + `","approved":true}`))
	f.Add([]byte(`{"digest":"` + req.Digest + `","approved":false,"reason":"no"}`))
	f.Add([]byte(`{"digest":"` + req.Digest + `"}`))
	f.Add([]byte(`{"digest":"` + req.Digest + `","approved":"true"}`))
	f.Add([]byte(`{"digest":"` + strings.ToUpper(req.Digest) + `","approved":true}`))
	f.Add([]byte(`yes`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, reason := g.check(&req, data, time.Now())
		switch reason {
		case "":
			if d.Approved == nil || d.Digest != req.Digest || len(data) > maxDecisionBytes {
				t.Fatalf("accepted %q as %+v", data, d)
			}
		case ignoreMalformed, ignoreTooLarge, ignoreDigest, ignoreLate:
		default:
			t.Fatalf("unknown reason %q", reason)
		}
	})
}

// FuzzDisplayJSON: what an operator reads holds no control, formatting or
// invalid runes, and for JSON input it is JSON with the same meaning.
func FuzzDisplayJSON(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"cmd":"\u001b[2J"}`, "{\"x\":\"a\u202eb\"}", `{"e":"😀"}`, "\xff\xfe", `["\u200b"]`, "{\"t\":\"\u00a0\"}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := displayJSON(s)
		for _, r := range out {
			if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("displayJSON(%q) = %q holds %U", s, out, r)
			}
		}
		canon, err := protocol.Canonical([]byte(s))
		if err != nil {
			return
		}
		shown := displayJSON(string(canon))
		var a, b any
		if err := json.Unmarshal(canon, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(shown), &b); err != nil {
			t.Fatalf("displayJSON(%q) = %q is not JSON: %v", canon, shown, err)
		}
		if !reflect.DeepEqual(a, b) {
			// Invalid UTF-8 inside strings decodes as U+FFFD both ways;
			// anything else must be identical.
			if !bytes.ContainsRune(canon, unicode.ReplacementChar) {
				t.Fatalf("displayJSON changed the meaning of %q: %q", canon, shown)
			}
		}
	})
}
