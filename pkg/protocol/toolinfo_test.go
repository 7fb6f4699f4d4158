package protocol

import (
	"errors"
	"testing"
)

func TestToolInfoSubjects(t *testing.T) {
	var s Subjects
	if got, _ := s.ToolInfo("calculator"); got != "fleet.tool.calculator" {
		t.Fatalf("ToolInfo = %q, want fleet.tool.calculator", got)
	}
	if got := s.ToolInfos(); got != "fleet.tool.>" {
		t.Fatalf("ToolInfos = %q, want fleet.tool.>", got)
	}
	for _, bad := range []string{"", "a.b", "*", ">"} {
		if _, err := s.ToolInfo(ToolName(bad)); !errors.Is(err, ErrInvalidField) {
			t.Errorf("ToolInfo(%q) err = %v, want invalid", bad, err)
		}
	}
}
