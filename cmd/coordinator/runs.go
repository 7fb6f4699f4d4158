package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// agentModel makes the model of a run's agent for "coordinator runs
// replay", as a serving coordinator makes it.
var agentModel runs.AgentModelFunc = (&providers.Models{Getenv: procsec.Getenv}).Model

// replayModel makes a replay's --model SPEC as "coordinator run --model"
// makes its model.
func replayModel(spec string) (loop.Model, error) {
	f := modelFlags{model: spec}
	return f.newModel(zerolog.Nop())
}

// maxFileBytes bounds an --instructions or --messages file.
const maxFileBytes = 1 << 20

// runsGroup is "coordinator runs": list, show, cancel, resume, replay or
// fork durable runs from their journals, or send one input, over NATS
// ($NATS_URL). A replay makes the model of the run's agent with
// agentModels; its --model takes the specs of "coordinator run --model".
func runsGroup(agentModels runs.AgentModelFunc) opGroup {
	return opGroup{
		name: "runs",
		commands: `  id SUBMISSION [--client C]  the run id of client C's submission (default: $NATS_USER,
                              else "default"), computed here: it reads and sends nothing
  list [FILTER]               every run with a journal: status, owner, round
  show RUN [--json]           one run: owner, round, pending calls and approvals
  cancel RUN [--reason R] [--by NAME]
                              cancel a run (its owner stops it at once; a
                              coordinator that takes it later cancels it too;
                              a parked run is resumed to end it cancelled);
                              --by names who asks (default: $USER; required)
  resume RUN [--reason R] [--by NAME]
                              resume a parked run: a serving coordinator
                              submits it again and any serving coordinator
                              continues it from its journal (no completed call
                              runs again); waits until one took it (--timeout)
  cancel|resume FILTER [--yes] [--reason R] [--by NAME]
                              the same for every run FILTER selects: without
                              --yes (or with --dry-run) it only counts and
                              lists them; with --yes it acts on each and
                              records the change in the audit stream
                              FLEET_TRAFFIC (subject fleet.traffic.runs)
  FILTER: --state running|parked|finished|cancel_requested, --agent A,
          --client C, --older-than DURATION (started longer ago); at least
          one for cancel and resume
  replay RUN [--agent-revision N] [--instructions FILE] [--model SPEC] [--json]
                              re-run the model steps of an ended run against its
                              journal: every call the model repeats is answered
                              from the journal, any other not_replayed; nothing
                              is published and nothing runs. Prints the first
                              round that differs and the calls added, dropped or
                              changed. The model: --model (scripted:FILE,
                              openai:MODEL, ...), else the agent revision's
  fork RUN --at ROUND [--messages FILE] [--out FILE]
                              the transcript of a new run that starts where RUN
                              was before ROUND (its earlier calls answered from
                              the journal, never run again), with FILE's
                              messages added; written to --out (default: stdout)
                              for the client to submit: coordinator submit
                              --messages FILE (its own calls have new keys; its
                              result's side_effects names what it ran)
  input RUN --enqueue|--interrupt --text TEXT [--client C]
                              as the run's client C (default: $NATS_USER, else
                              "default"), add a user message to its run in
                              flight: --enqueue, seen at its next model step;
                              --interrupt, the round's non-idempotent calls no
                              worker claimed are withdrawn first (answered
                              interrupted, never run).
                              Waits until the run's coordinator accepted it
                              (--timeout)

The same with the nats CLI (prefix "fleet"):
  nats stream subjects FLEET_JOURNAL 'fleet.journal.run.*'    runs with a journal
  nats stream view FLEET_JOURNAL --subject fleet.journal.run.RUN
  nats pub fleet.journal.cancel.RUN '{"v":1,"run_id":"RUN","by":"NAME","reason":"..."}'
  nats pub fleet.journal.resume.RUN '{"v":1,"run_id":"RUN","by":"NAME","reason":"..."}'
                                                              resume a parked run (core NATS: a
                                                              serving coordinator must hear it)
                                                              cancel (stored in FLEET_CANCELS; a
                                                              message that is not such a request
                                                              for RUN cancels nothing)
  nats req --raw '$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.CLIENT.RUN' ''
                                                              the result, once stored (as CLIENT)
  nats req fleet.run.input.CLIENT.RUN '{"v":1,"run_id":"RUN","mode":"enqueue","content":"..."}'
                                                              a new message to the run (as CLIENT)
Run "runs <command> -h" for a command's flags.
`,
		subs: map[string]func(context.Context, *op, []string) int{
			"id":     runsID,
			"list":   runsList,
			"ls":     runsList,
			"show":   runsShow,
			"cancel": func(ctx context.Context, o *op, args []string) int { return runsChange(ctx, o, args, "cancel") },
			"resume": func(ctx context.Context, o *op, args []string) int { return runsChange(ctx, o, args, "resume") },
			"replay": func(ctx context.Context, o *op, args []string) int { return runsReplay(ctx, o, args, agentModels) },
			"fork":   runsFork,
			"input":  runsInput,
		},
	}
}

// clientFlag registers --client, the submitting client: $NATS_USER, else
// "default".
func clientFlag(fs *flag.FlagSet) *string {
	return fs.String("client", cmp.Or(os.Getenv("NATS_USER"), "default"), "the submitting client (id; default: $NATS_USER, else default)")
}

// filterFlags registers the flags of a selection of runs.
func filterFlags(fs *flag.FlagSet) *runs.Filter {
	var f runs.Filter
	fs.StringVar(&f.Agent, "agent", "", "the runs of this agent")
	fs.StringVar(&f.Client, "client", "", "the runs this client submitted")
	fs.StringVar(&f.Status, "state", "", "the runs in this state (running, parked, finished, cancel_requested)")
	fs.DurationVar(&f.OlderThan, "older-than", 0, "the runs started longer ago than this")
	return &f
}

// checkFilter refuses a --state that is no status.
func checkFilter(o *op, f *runs.Filter) (code int, ok bool) {
	switch f.Status {
	case "", runs.StatusRunning, runs.StatusParked, runs.StatusFinished, runs.StatusCancelRequested:
		return exitOK, true
	}
	return o.usageError("--state must be running, parked, finished or cancel_requested, got %q", clipLine(f.Status)), false
}

// runArg parses a runs subcommand's flags and its one positional
// argument, a run id ([runID]). When done is set the subcommand returns
// code.
func runArg(o *op, args []string) (_ protocol.RunID, code int, done bool) {
	pos, code, done := o.parse(args, anyNumber)
	if done {
		return "", code, true
	}
	return runID(o, pos)
}

// runID parses the positional arguments pos: one run id. When done is set
// the subcommand returns code.
func runID(o *op, pos []string) (_ protocol.RunID, code int, done bool) {
	if code, done := o.argCount(pos, 1); done {
		return "", code, true
	}
	run, err := protocol.ParseRunID(pos[0])
	if err != nil {
		return "", o.usageError("%q is not a run id", termsafe.Line(pos[0], 32)), true
	}
	return run, exitOK, false
}

func runsID(_ context.Context, o *op, args []string) int {
	fs := o.flags("id SUBMISSION [--client C]")
	client := clientFlag(fs)
	pos, code, done := o.parse(args, 1)
	if done {
		return code
	}
	if !protocol.ValidToken(*client) || !protocol.ValidToken(pos[0]) {
		return o.usageError("the client (%q) and the submission id (%q) must each be a token, [A-Za-z0-9_-]{1,64}", termsafe.Line(*client, 32), termsafe.Line(pos[0], 32))
	}
	fmt.Fprintln(o.stdout, protocol.SubmissionRunID(*client, pos[0]))
	return exitOK
}

func runsList(ctx context.Context, o *op, args []string) int {
	fs := o.flags("list [--state S] [--agent A] [--client C] [--older-than D] [--json]")
	f := filterFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	_, code, done := o.parse(args, 0)
	if done {
		return code
	}
	if code, ok := checkFilter(o, f); !ok {
		return code
	}
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		states, err := runs.Select(ctx, conn.js, o.subjects, *f)
		if err != nil {
			return err
		}
		switch {
		case *asJSON:
			err = json.NewEncoder(o.stdout).Encode(states)
		case len(states) == 0:
			fmt.Fprintln(o.stdout, "no runs with a journal")
		default:
			err = printStates(o.stdout, states)
		}
		return err
	})
}

func runsShow(ctx context.Context, o *op, args []string) int {
	fs := o.flags("show RUN [--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	run, code, done := runArg(o, args)
	if done {
		return code
	}
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		st, err := runs.Get(ctx, conn.js, o.subjects, run)
		if errors.Is(err, runs.ErrNoJournal) {
			return fmt.Errorf("run %s has no journal", run)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			if err := json.NewEncoder(o.stdout).Encode(st); err != nil {
				return err
			}
			return nil
		}
		status := st.Status
		if st.Termination != "" {
			status += " (" + string(st.Termination) + ")"
		}
		if st.DryRun {
			status += ", a dry run"
		}
		w := o.stdout
		fmt.Fprintf(w, "run:        %s\nstatus:     %s\nowner:      %s (%d owner(s))\nround:      %d\nlast step:  %s at %s\nresult:     %v\n",
			st.RunID, status, st.Owner, st.Owners, st.Round, st.LastStep, st.LastAt.UTC().Format(time.RFC3339), st.HasResult)
		for _, c := range st.PendingApprovals {
			fmt.Fprintf(w, "awaiting approval: %s %s (until %s)\n", c.CallKey, c.Tool, st.ApprovalDeadline.UTC().Format(time.RFC3339))
		}
		for _, c := range st.PendingCalls {
			fmt.Fprintf(w, "pending call:      %s %s (deadline %s)\n", c.CallKey, c.Tool, c.Deadline.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

// printStates prints one line per run.
func printStates(w io.Writer, states []runs.State) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tOWNER\tROUND\tPENDING\tLAST STEP")
	for _, st := range states {
		status := st.Status
		if st.Termination != "" {
			status += ":" + string(st.Termination)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d calls, %d approvals\t%s\n", st.RunID, status, st.Owner, st.Round,
			len(st.PendingCalls), len(st.PendingApprovals), st.LastStep)
	}
	return tw.Flush()
}

// runsChange is "cancel|resume RUN" and "cancel|resume FILTER".
func runsChange(ctx context.Context, o *op, args []string, action string) int {
	fs := o.flags(action + " RUN|FILTER [--yes] [--dry-run] [--reason R] [--by NAME]")
	f := filterFlags(fs)
	reason := fs.String("reason", "", "why (recorded with the request)")
	by := fs.String("by", os.Getenv("USER"), "who asks (default: $USER; required)")
	yes := fs.Bool("yes", false, "by filter: act (without it, only count and list)")
	dryRun := fs.Bool("dry-run", false, "by filter: only count and list (the default without --yes)")
	pos, code, done := o.parse(args, anyNumber)
	if done {
		return code
	}
	bulk := len(pos) == 0
	switch {
	case bulk && f.Empty():
		return o.usageError("name a run, or select runs with --state, --agent, --client or --older-than")
	}
	if code, ok := checkFilter(o, f); !ok {
		return code
	}
	if *by == "" {
		return o.usageError("--by is required ($USER is not set): a request names who asks")
	}
	var run protocol.RunID
	if !bulk {
		if run, code, done = runID(o, pos); done {
			return code
		}
	}
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		var err error
		if bulk {
			err = bulkChange(ctx, conn.nc, conn.js, o.subjects, action, *f, *by, *reason, *yes && !*dryRun, o.stdout)
		} else {
			err = change(ctx, conn.nc, conn.js, o.subjects, action, run, *by, *reason, o.stdout)
		}
		return err
	})
}

// change cancels or resumes one run; a parked run that is cancelled is
// resumed too ([runs.WakeToEnd]).
func change(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, action string, run protocol.RunID, by, reason string, w io.Writer) error {
	if action == "resume" {
		st, err := runs.Resume(ctx, nc, js, subjects, run, by, reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "run %s resumed by %s\n", run, st.Owner)
		return nil
	}
	if err := runs.Cancel(ctx, js, subjects, run, by, reason); err != nil {
		return err
	}
	fmt.Fprintf(w, "cancel requested for run %s\n", run)
	woken, err := runs.WakeToEnd(ctx, nc, js, subjects, run, by, reason)
	if err != nil {
		return err
	}
	if woken {
		fmt.Fprintf(w, "run %s was parked: resumed, to end cancelled\n", run)
	}
	return nil
}

// bulkChange cancels or resumes every run f selects that action applies
// to ([runs.Targets]): it prints the count and the runs, and with act
// records the change in the audit log, then makes it run by run.
func bulkChange(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, action string, f runs.Filter, by, reason string, act bool, w io.Writer) error {
	states, err := runs.Targets(ctx, js, subjects, action, f)
	if err != nil {
		return err
	}
	verb := map[string]string{"cancel": "cancelled", "resume": "resumed"}[action]
	if !act {
		fmt.Fprintf(w, "%d run(s) would be %s (run again with --yes):\n", len(states), verb)
		if len(states) > 0 {
			return printStates(w, states)
		}
		return nil
	}
	if len(states) == 0 {
		fmt.Fprintf(w, "0 run(s) %s: none selected\n", verb)
		return nil
	}
	if err := runs.Record(ctx, js, subjects, action, f, states, by, reason); err != nil {
		return err
	}
	var failed int
	for _, st := range states {
		if err := change(ctx, nc, js, subjects, action, st.RunID, by, reason, w); err != nil {
			failed++
			fmt.Fprintf(w, "run %s: %v\n", st.RunID, err)
		}
	}
	fmt.Fprintf(w, "%d run(s) %s, %d failed\n", len(states)-failed, verb, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d run(s) not %s", failed, len(states), verb)
	}
	return nil
}

func runsReplay(ctx context.Context, o *op, args []string, agentModels runs.AgentModelFunc) int {
	fs := o.flags("replay RUN [--agent-revision N] [--instructions FILE] [--model SPEC] [--json]")
	agentRev := fs.Uint64("agent-revision", 0, "the revision of the run's agent to replay on (its instructions, model and limits)")
	instructions := fs.String("instructions", "", "a `FILE` holding the instructions to replay with")
	modelSpec := fs.String("model", "", "the model to replay with: scripted:FILE | openai:MODEL | openai-responses:MODEL | anthropic:MODEL")
	asJSON := fs.Bool("json", false, "print JSON")
	run, code, done := runArg(o, args)
	if done {
		return code
	}
	ro := runs.ReplayOptions{AgentRevision: *agentRev, AgentModels: agentModels}
	if *instructions != "" {
		data, err := readFile(*instructions)
		if err != nil || strings.TrimSpace(string(data)) == "" {
			return o.usageError("--instructions: %v", cmp.Or(err, errors.New("the file is empty")))
		}
		ro.Instructions = string(data)
	}
	if *modelSpec != "" {
		m, err := replayModel(*modelSpec)
		if err != nil {
			return o.usageError("--model: %v", err)
		}
		ro.Model = m
	}
	replayCtx := ctx // the replay itself: --timeout bounds only its reads (withNATS's ctx)
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		rep, err := runs.Replay(replayCtx, ctx, conn.js, o.subjects, run, ro)
		if err != nil {
			return err
		}
		if !*asJSON {
			printReport(o.stdout, run, rep)
			return nil
		}
		if err := json.NewEncoder(o.stdout).Encode(struct {
			RunID protocol.RunID `json:"run_id"`
			*loop.ReplayReport
		}{run, rep}); err != nil {
			return err
		}
		return nil
	})
}

// printReport writes a replay's report for a person.
func printReport(w io.Writer, run protocol.RunID, rep *loop.ReplayReport) {
	fmt.Fprintf(w, "run:        %s\n", run)
	fmt.Fprintf(w, "recorded:   %d rounds, %s, %d calls\n", rep.Recorded.Rounds, rep.Recorded.Termination, rep.Recorded.ToolCalls)
	fmt.Fprintf(w, "replayed:   %d rounds, %s, %d calls: %d answered from the journal, %d not_replayed; nothing ran\n",
		rep.Replayed.Rounds, rep.Replayed.Termination, rep.Replayed.ToolCalls, rep.ReplayedCalls, rep.NotReplayedCalls)
	if !rep.Diverged {
		fmt.Fprintln(w, "diverged:   no")
		return
	}
	if rep.FirstDivergingRound == 0 {
		fmt.Fprintln(w, "diverged:   yes, in how the run ended")
		return
	}
	fmt.Fprintf(w, "diverged:   yes, first in round %d\n", rep.FirstDivergingRound)
	call := func(d loop.CallDigest) string {
		return fmt.Sprintf("%s {%s} %s", d.Tool, strings.Join(d.ArgKeys, ", "), d.Digest)
	}
	for _, d := range rep.Rounds {
		fmt.Fprintf(w, "round %d:\n", d.Round)
		for _, c := range d.Changed {
			fmt.Fprintf(w, "  changed  %s -> {%s} %s\n", call(c.From), strings.Join(c.To.ArgKeys, ", "), c.To.Digest)
		}
		for _, c := range d.Added {
			fmt.Fprintf(w, "  added    %s\n", call(c))
		}
		for _, c := range d.Dropped {
			fmt.Fprintf(w, "  dropped  %s\n", call(c))
		}
		if d.AnswerChanged {
			fmt.Fprintln(w, "  answer   changed")
		}
	}
}

func runsFork(ctx context.Context, o *op, args []string) int {
	fs := o.flags("fork RUN --at ROUND [--messages FILE] [--out FILE]")
	at := fs.Int("at", 0, "the round the fork starts at, from 1")
	messages := fs.String("messages", "", "a JSON `FILE` of messages to add at the fork point")
	out := fs.String("out", "", "where to write the fork's transcript (default: stdout)")
	run, code, done := runArg(o, args)
	if done {
		return code
	}
	if *at < 1 {
		return o.usageError("--at ROUND is required, from 1")
	}
	var more []loop.Message
	if *messages != "" {
		var err error
		if more, err = readMessages(*messages); err != nil {
			return o.usageError("--messages: %v", err)
		}
	}
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		msgs, err := runs.Fork(ctx, conn.js, o.subjects, run, *at, more)
		if err == nil {
			err = writeFork(o.stdout, o.stderr, *out, run, *at, msgs)
		}
		return err
	})
}

// readFile reads a file of at most maxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	return data, nil
}

// readMessages reads a JSON array of chat-completions messages.
func readMessages(path string) ([]loop.Message, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var msgs []loop.Message
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msgs); err != nil || dec.More() {
		return nil, fmt.Errorf("%s: not a JSON array of {role, content, tool_calls, tool_call_id} messages", path)
	}
	return msgs, nil
}

// writeFork writes a fork's transcript to path (stdout when empty) and
// says on stderr how to submit it.
func writeFork(stdout, stderr io.Writer, path string, run protocol.RunID, at int, msgs []loop.Message) error {
	data, err := json.MarshalIndent(msgs, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "" {
		_, err = stdout.Write(data)
	} else {
		err = os.WriteFile(path, data, 0o600)
	}
	if err != nil {
		return err
	}
	file := path
	if file == "" {
		file = "FILE"
	}
	fmt.Fprintf(stderr, "fork of run %s at round %d: %d messages; submit it as the client: coordinator submit --messages %s\n", run, at, len(msgs), file)
	return nil
}

func runsInput(ctx context.Context, o *op, args []string) int {
	fs := o.flags("input RUN --enqueue|--interrupt --text TEXT [--client C]")
	enqueue := fs.Bool("enqueue", false, "the message is seen at the run's next model step")
	interrupt := fs.Bool("interrupt", false, "interrupt the run's round first")
	text := fs.String("text", "", "the user message")
	client := clientFlag(fs)
	run, code, done := runArg(o, args)
	if done {
		return code
	}
	if *enqueue == *interrupt || strings.TrimSpace(*text) == "" || !protocol.ValidToken(*client) {
		return o.usageError("give one of --enqueue and --interrupt, a non-blank --text, and a client that is a token")
	}
	mode := protocol.RunInputEnqueue
	if *interrupt {
		mode = protocol.RunInputInterrupt
	}
	return withNATS(ctx, o, useConn, func(ctx context.Context, conn natsConn) error {
		if err := runs.Input(ctx, conn.nc, o.subjects, *client, run, mode, *text); err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "run %s took the input (%s)\n", run, mode)
		return nil
	})
}
