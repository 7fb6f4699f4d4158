package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/termui"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/transcript"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// submitFlags are the flags of "coordinator submit".
type submitFlags struct {
	connFlags
	wait                             bool
	timeout, waitTimeout             time.Duration
	output                           string
	messagesFile                     string
	maxRounds, maxCalls, maxObsChars int
	toolTimeout                      time.Duration
	requireApproval                  string
	client, agent, id                string
	class                            string
	dryRun                           bool
}

func newSubmitFlagSet(f *submitFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("coordinator submit", stderr)
	f.connFlags.register(fs, false)
	fs.BoolVar(&f.wait, "wait", false, "wait for the run's result and print it (default: print the run id once it is queued)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to keep trying to connect and to have the run stored (retries reuse the submission id: never a second run)")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 0, "with --wait, how long to wait for the result (default: until interrupted)")
	fs.StringVar(&f.output, "output", "text", "text | json")
	fs.StringVar(&f.messagesFile, "messages", "", "a JSON `FILE` holding a transcript to continue, instead of a PROMPT: chat-completions messages, an Anthropic Messages transcript or Responses input items (calls left unanswered are answered outcome_unknown)")
	fs.IntVar(&f.maxRounds, "max-rounds", 0, "lower the coordinators' max rounds (default: theirs)")
	fs.IntVar(&f.maxCalls, "max-tool-calls-per-round", 0, "lower the coordinators' tool calls per round (default: theirs)")
	fs.IntVar(&f.maxObsChars, "max-observation-chars", 0, "lower the coordinators' observation bound (default: theirs)")
	fs.DurationVar(&f.toolTimeout, "tool-timeout", 0, "lower every call's timeout (default: the coordinators' or each tool's own)")
	fs.StringVar(&f.requireApproval, "require-approval", "", "more tools whose calls need a human's approval: comma list, or *")
	fs.StringVar(&f.client, "client", "", "submit as this client (fleet.run.submit.NAME.AGENT.ID), whose results only it may read (default: the NATS user, else \"default\")")
	fs.StringVar(&f.agent, "agent", "", "the agent `NAME` to run (default: \"default\")")
	fs.StringVar(&f.class, "class", "", "the run's priority class, interactive or batch (default: the agent's, else interactive): a tool's waiting interactive calls start before its batch calls")
	fs.BoolVar(&f.dryRun, "dry-run", false, "a dry run: only tools declared read-only run; every other call is gated as usual and answered simulated, with what would have run")
	fs.StringVar(&f.id, "id", "", "the submission `ID`: submitting the same ID again never runs a second time (default: a random one)")
	return fs
}

// request builds the run request the flags and PROMPT describe.
func (f *submitFlags) request(prompt string) (protocol.RunRequest, error) {
	for _, c := range []struct {
		name string
		v    int
	}{{"max-rounds", f.maxRounds}, {"max-tool-calls-per-round", f.maxCalls}, {"max-observation-chars", f.maxObsChars}} {
		if c.v < 0 {
			return protocol.RunRequest{}, &usageError{fmt.Sprintf("--%s must be >= 0, got %d", c.name, c.v)}
		}
	}
	if f.toolTimeout < 0 {
		return protocol.RunRequest{}, &usageError{fmt.Sprintf("--tool-timeout must be >= 0, got %v", f.toolTimeout)}
	}
	if err := checkOutput(f.output); err != nil {
		return protocol.RunRequest{}, err
	}
	req := protocol.RunRequest{
		V: protocol.Version, Prompt: prompt,
		MaxRounds: f.maxRounds, MaxToolCallsPerRound: f.maxCalls, MaxObservationChars: f.maxObsChars,
		RequireApproval: splitList(f.requireApproval),
		Class:           f.class,
		DryRun:          f.dryRun,
	}
	if f.toolTimeout > 0 {
		req.ToolTimeoutMS = max(f.toolTimeout.Milliseconds(), 1)
	}
	switch {
	case f.messagesFile != "" && prompt != "":
		return req, &usageError{"give a PROMPT or --messages, not both"}
	case f.messagesFile != "":
		data, err := os.ReadFile(f.messagesFile)
		if err != nil {
			return req, &usageError{fmt.Sprintf("--messages: %v", err)}
		}
		req.Messages = bytes.TrimSpace(data)
		// An Anthropic or Responses transcript travels as chat messages.
		if msgs, format, err := transcript.Decode(req.Messages); err == nil && format != transcript.FormatChat {
			if b, err := json.Marshal(msgs); err == nil {
				req.Messages = b
			}
		}
	case prompt == "":
		return req, &usageError{"a PROMPT (or --messages FILE) is required"}
	}
	if err := req.Validate(); err != nil {
		return req, &usageError{err.Error()}
	}
	return req, nil
}

// submitCommand runs "coordinator submit": what "nats req <prefix>.run.submit"
// does, and with --wait, waits for the result and prints it.
func submitCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f submitFlags
	fs := newSubmitFlagSet(&f, stderr)
	cmd := &command{name: "coordinator submit", fs: fs, flags: connFlagOf, stderr: stderr,
		usage: `[flags] PROMPT

Stores a run in the fleet's runs stream for the coordinators serving it
("coordinator serve"), as "nats req fleet.run.submit.CLIENT.AGENT.ID
'{\"prompt\": \"...\"}' -H Nats-Msg-Id:submit-LEN-CLIENT-ID -H Fleet-Agent:AGENT" does, retrying until --timeout (with the same
submission id: never a second run), and prints its run id; with --wait,
prints its result. Limits may only lower the coordinators' own.

Flags:`,
		exits: "0 accepted (with --wait: a final answer), 3 max rounds reached, 2 bad usage or a refused request, 1 other error"}
	pos, _, code, done := cmd.parse(args, anyArgs)
	if done {
		return code
	}
	subjects, err := protocol.NewSubjects(f.prefix)
	if err != nil {
		return cmd.fail(&usageError{fmt.Sprintf("--prefix: %v", err)})
	}
	req, err := f.request(strings.Join(pos, " "))
	if err != nil {
		return cmd.fail(err)
	}
	if err := f.conn().Validate(); err != nil {
		return cmd.fail(nest("Conn", err))
	}

	for _, c := range []struct{ flag, v string }{{"client", f.client}, {"agent", f.agent}, {"id", f.id}} {
		if c.v != "" && !protocol.ValidToken(c.v) {
			return cmd.fail(&usageError{fmt.Sprintf("--%s must match %s, got %q", c.flag, protocol.TokenPattern, c.v)})
		}
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	conn := f.conn()
	conn.Name = "toolfleet-submit"
	nc, err := natsbus.Connect(cctx, conn)
	if err != nil {
		return cmd.fail(nest("Conn", err))
	}
	defer nc.Close()
	name := f.client
	if name == "" {
		if user := os.Getenv(natsbus.EnvUser); f.user == "" && protocol.ValidToken(user) {
			name = user
		}
	}
	cl, err := client.New(nc, client.Config{Prefix: subjects.Prefix, Client: name, Domain: f.conn().Domain()})
	if err != nil {
		return cmd.fail(err)
	}
	data, err := protocol.Encode(&req)
	if err != nil {
		return cmd.fail(err)
	}
	run, err := cl.SubmitRaw(cctx, f.agent, f.id, data)
	if err != nil {
		return cmd.fail(err)
	}
	if run.Duplicate {
		// The same submission id was stored before: this is its run, and
		// what this command sent (another prompt, perhaps) was not stored.
		fmt.Fprintf(stderr, "coordinator submit: submission %q was already stored: this is its run %s; the request sent now was not submitted (use a new --id for a new run)\n", run.Submission, run.ID)
	}
	resp := protocol.RunResponse{V: protocol.Version, Status: protocol.RunAccepted, RunID: run.ID,
		ResultSubject: run.Subject, ResultBucket: subjects.RunsBucket(), ResultKey: run.Key}
	if !f.wait {
		if f.output == "json" {
			writeJSON(stdout, resp)
		} else {
			fmt.Fprintln(stdout, resp.RunID)
		}
		return exitOK
	}

	fmt.Fprintf(stderr, "coordinator submit: run %s accepted; waiting for its result\n", resp.RunID)
	// At a terminal, the run's tool progress shows as live status lines
	// until the result comes (reports sent before this subscription are
	// not seen: progress travels on core NATS).
	endDisplay := func() {}
	if f.output == "text" && logging.IsTerminal(stdout) {
		width := 0
		if file, ok := stdout.(*os.File); ok {
			width = termui.Width(file)
		}
		d := termui.New(stdout, termui.Config{Live: true, Width: width})
		if stop, err := coordinator.FollowProgress(nc, subjects, cl.Name(), run.ID, d.Progress); err == nil {
			endDisplay = func() { stop(); d.Close() }
		}
	}
	wctx := ctx
	if f.waitTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, f.waitTimeout)
		defer cancel()
	}
	resPtr, err := cl.Wait(wctx, run)
	endDisplay()
	if resPtr == nil {
		fmt.Fprintf(stderr, "coordinator submit: %v (the result will be in bucket %s under key %s)\n", err, resp.ResultBucket, run.Key)
		return exitError
	}
	res := *resPtr
	raw, err := protocol.Encode(&res)
	if err != nil {
		return cmd.fail(err)
	}
	if err := printRunResult(stdout, f.output, res, raw); err != nil {
		return cmd.fail(fmt.Errorf("writing the result: %w", err))
	}
	switch {
	case res.Error != nil:
		fmt.Fprintf(stderr, "coordinator submit: run %s: %s\n", res.RunID, describeRunError(res.Error))
		if res.TerminationReason != "" {
			return exitError
		}
		return exitForRunError(res.Error)
	case res.TerminationReason == string(loop.TerminationNatural):
		return exitOK
	case res.TerminationReason == string(loop.TerminationMaxRounds):
		return exitMaxRounds
	default:
		return exitError
	}
}

// printRunResult prints a served run's result: the stored JSON, or the
// transcript and a line on how it was served.
func printRunResult(w io.Writer, format string, res protocol.RunResult, raw []byte) error {
	if format == "json" {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	}
	if res.TerminationReason != "" {
		var lr loop.Result
		if err := json.Unmarshal(raw, &lr); err != nil {
			return err
		}
		if err := writeTranscript(w, &lr); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "served by %s (attempt %d)", res.Coordinator, res.Attempt)
	if l := res.Limits; l != nil {
		fmt.Fprintf(w, "; limits: max rounds %d, tool calls per round %d, observation chars %d",
			l.MaxRounds, l.MaxToolCallsPerRound, l.MaxObservationChars)
		if l.ToolTimeoutMS > 0 {
			fmt.Fprintf(w, ", tool timeout %v", time.Duration(l.ToolTimeoutMS)*time.Millisecond)
		}
	}
	if len(res.Clamped) > 0 {
		fmt.Fprintf(w, "; lowered to the coordinator's ceiling: %s", strings.Join(res.Clamped, ", "))
	}
	if res.TranscriptOmitted {
		fmt.Fprint(w, "; the transcript was too large to store")
	}
	_, err := fmt.Fprintln(w)
	return err
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func describeRunError(e *protocol.RunError) string {
	if e == nil {
		return "no reason given"
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %q: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// exitForRunError is 2 for a request the submitter must change, 1 for
// anything else.
func exitForRunError(e *protocol.RunError) int {
	if e == nil {
		return exitError
	}
	switch e.Code {
	case protocol.CodeTooLarge, protocol.CodeMalformed, protocol.CodeVersion, protocol.CodeMissingField, protocol.CodeInvalidField:
		return exitUsage
	}
	return exitError
}
