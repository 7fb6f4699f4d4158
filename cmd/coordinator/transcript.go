package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// writeTranscript prints a run for people: each message, each call with its
// outcome, then the answer and the counts.
func writeTranscript(w io.Writer, res *loop.Result) error {
	bw := bufio.NewWriter(w)
	calls := map[string]loop.CallRecord{}
	for _, c := range res.Calls {
		calls[c.CallID] = c
	}
	fmt.Fprintf(bw, "run %s\n", res.RunID)
	for _, m := range res.Messages {
		switch m.Role {
		case "tool":
			c := calls[m.ToolCallID]
			fmt.Fprintf(bw, "\n  [%s %s → %s, %d ms", line(m.ToolCallID), line(c.Tool), line(string(c.Outcome)), c.DurationMS)
			if c.Worker != "" {
				fmt.Fprintf(bw, ", worker %s", line(c.Worker))
			}
			fmt.Fprintf(bw, "]\n%s\n", indent(termsafe.Text(m.Content), "    "))
		case "assistant":
			if m.Content != "" {
				fmt.Fprintf(bw, "\nassistant:\n%s\n", indent(termsafe.Text(m.Content), "  "))
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(bw, "\nassistant calls %s(%s) as %s\n", line(tc.Function.Name), line(tc.Function.Arguments), line(tc.ID))
			}
		default:
			fmt.Fprintf(bw, "\n%s:\n%s\n", line(m.Role), indent(termsafe.Text(m.Content), "  "))
		}
	}
	md := res.Metadata
	fmt.Fprintf(bw, "\nanswer: %s\n", termsafe.Text(res.Answer))
	fmt.Fprintf(bw, "termination: %s; rounds %d, tool calls %d, rejected %d, truncated %d",
		res.TerminationReason, md.Rounds, md.ToolCallsMade, md.RejectedToolCalls, md.TruncatedObservations)
	outcomes := make([]string, 0, len(md.Outcomes))
	for o, n := range md.Outcomes {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, n))
	}
	sort.Strings(outcomes)
	if len(outcomes) > 0 {
		fmt.Fprintf(bw, "; outcomes: %s", strings.Join(outcomes, ", "))
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

// line makes one field safe to print on the transcript's line.
func line(s string) string { return termsafe.Line(s, 0) }

func indent(s, pad string) string {
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}
