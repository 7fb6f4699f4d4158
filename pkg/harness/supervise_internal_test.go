//go:build linux

package harness

import (
	"strings"
	"testing"
)

func FuzzParseStatus(f *testing.F) {
	f.Add("started 123\nexit 0 0 0\n")
	f.Add("started -1\nexit -1 9 2\n")
	f.Add("start-error\n")
	f.Add("started 1\n")
	f.Add("started 0\n")
	f.Fuzz(func(t *testing.T, s string) {
		st := parseStatus(strings.NewReader(s))
		if st.toolPID != 0 && st.toolPID <= 1 {
			t.Fatalf("pid %d would kill more than the tool's group", st.toolPID)
		}
	})
}
