package runs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Exit statuses of [Command].
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usage = `usage: runs <command> [flags]

commands:
  id SUBMISSION [--client C]  the run id of client C's submission (default: $NATS_USER,
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
`

// Command runs "runs id|list|show|cancel|replay|fork". conn opens the NATS
// connection, which Command closes. The result is the exit status: 0
// done, 1 error, 2 bad usage. A replay's --model is refused: see
// [ModelCommand].
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
	return command(ctx, args, stdout, stderr, conn, nil, nil)
}

// ModelCommand returns [Command] whose replay makes its --model SPEC with
// models, and the model of the run's agent with agentModels.
func ModelCommand(models ModelFunc, agentModels AgentModelFunc) func(context.Context, []string, io.Writer, io.Writer, func(context.Context) (*nats.Conn, error)) int {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
		return command(ctx, args, stdout, stderr, conn, models, agentModels)
	}
}

func command(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error), models ModelFunc, agentModels AgentModelFunc) int {
	if len(args) > 0 && args[0] == "runs" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet("runs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", protocol.DefaultPrefix, "subject prefix of the fleet")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the command's NATS work")
	asJSON := fs.Bool("json", false, "print JSON (show, list, replay)")
	reason := fs.String("reason", "", "why (cancel)")
	by := fs.String("by", os.Getenv("USER"), "who asks (cancel; default: $USER)")
	client := fs.String("client", cmp.Or(os.Getenv("NATS_USER"), "default"), "the submitting client (id; default: $NATS_USER, else default)")
	agentRev := fs.Uint64("agent-revision", 0, "replay: the revision of the run's agent to replay on (its instructions, model and limits)")
	instructions := fs.String("instructions", "", "replay: a `FILE` holding the instructions to replay with")
	modelSpec := fs.String("model", "", "replay: the model to replay with: scripted:FILE | openai:MODEL | openai-responses:MODEL | anthropic:MODEL")
	at := fs.Int("at", 0, "fork: the round the fork starts at, from 1")
	messages := fs.String("messages", "", "fork: a JSON `FILE` of messages to add at the fork point")
	out := fs.String("out", "", "fork: where to write the fork's transcript (default: stdout)")
	var f Filter
	fs.StringVar(&f.Agent, "agent", "", "list, cancel, resume: the runs of this agent")
	fs.StringVar(&f.Status, "state", "", "list, cancel, resume: the runs in this state (running, parked, finished, cancel_requested)")
	fs.DurationVar(&f.OlderThan, "older-than", 0, "list, cancel, resume: the runs started longer ago than this")
	yes := fs.Bool("yes", false, "cancel, resume by filter: act (without it, only count and list)")
	enqueue := fs.Bool("enqueue", false, "input: the message is seen at the run's next model step")
	interrupt := fs.Bool("interrupt", false, "input: interrupt the run's round first")
	text := fs.String("text", "", "input: the user message")
	dryRun := fs.Bool("dry-run", false, "cancel, resume by filter: only count and list (the default without --yes)")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := map[string]int{"id": 1, "list": 0, "ls": 0, "show": 1, "cancel": 1, "resume": 1, "replay": 1, "fork": 1, "input": 1}
	n, ok := want[name]
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "client" {
			f.Client = *client
		}
	})
	bulk := (name == "cancel" || name == "resume") && len(pos) == 0
	if bulk {
		n = 0
	}
	switch {
	case bulk && f.Empty():
		fmt.Fprintf(stderr, "runs %s: name a run, or select runs with --state, --agent, --client or --older-than\n", name)
		return exitUsage
	case f.Status != "" && !slices.Contains([]string{StatusRunning, StatusParked, StatusFinished, StatusCancelRequested}, f.Status):
		fmt.Fprintf(stderr, "runs: --state must be running, parked, finished or cancel_requested, got %q\n", clip(f.Status))
		return exitUsage
	case name == "help" || name == "-h" || name == "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case !ok:
		fmt.Fprintf(stderr, "runs: unknown command %q\n%s", clip(name), usage)
		return exitUsage
	case len(pos) != n:
		fmt.Fprintf(stderr, "runs %s: takes %d argument(s), got %d\n%s", name, n, len(pos), usage)
		return exitUsage
	}
	if name == "id" {
		if !protocol.ValidToken(*client) || !protocol.ValidToken(pos[0]) {
			fmt.Fprintf(stderr, "runs id: the client (%q) and the submission id (%q) must each be a token, [A-Za-z0-9_-]{1,64}\n", clip(*client), clip(pos[0]))
			return exitUsage
		}
		fmt.Fprintln(stdout, protocol.SubmissionRunID(*client, pos[0]))
		return exitOK
	}
	if name == "input" && (*enqueue == *interrupt || strings.TrimSpace(*text) == "" || !protocol.ValidToken(*client)) {
		fmt.Fprintf(stderr, "runs input: give one of --enqueue and --interrupt, a non-blank --text, and a client that is a token\n")
		return exitUsage
	}
	if name == "fork" && *at < 1 {
		fmt.Fprintf(stderr, "runs fork: --at ROUND is required, from 1\n")
		return exitUsage
	}
	ro := ReplayOptions{AgentModels: agentModels}
	var more []loop.Message
	switch name {
	case "replay":
		ro.AgentRevision = *agentRev
		if *instructions != "" {
			data, err := readFile(*instructions)
			if err != nil || strings.TrimSpace(string(data)) == "" {
				fmt.Fprintf(stderr, "runs replay: --instructions: %v\n", cmp.Or(err, errors.New("the file is empty")))
				return exitUsage
			}
			ro.Instructions = string(data)
		}
		if *modelSpec != "" {
			if models == nil {
				fmt.Fprintf(stderr, "runs replay: --model is not available here\n")
				return exitUsage
			}
			m, err := models(*modelSpec)
			if err != nil {
				fmt.Fprintf(stderr, "runs replay: --model: %v\n", err)
				return exitUsage
			}
			ro.Model = m
		}
	case "fork":
		if *messages != "" {
			var err error
			if more, err = readMessages(*messages); err != nil {
				fmt.Fprintf(stderr, "runs fork: --messages: %v\n", err)
				return exitUsage
			}
		}
	}
	if (name == "cancel" || name == "resume") && *by == "" {
		fmt.Fprintf(stderr, "runs %s: --by is required ($USER is not set): a request names who asks\n", name)
		return exitUsage
	}
	var run protocol.RunID
	if n == 1 {
		var err error
		if run, err = protocol.ParseRunID(pos[0]); err != nil {
			fmt.Fprintf(stderr, "runs %s: %q is not a run id\n", name, clip(pos[0]))
			return exitUsage
		}
	}
	subjects, err := protocol.NewSubjects(*prefix)
	if err != nil {
		fmt.Fprintf(stderr, "runs: --prefix: %v\n", err)
		return exitUsage
	}
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := conn(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "runs %s: connecting to NATS: %v\n", name, err)
		return exitError
	}
	defer nc.Close()
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		fmt.Fprintf(stderr, "runs %s: %v\n", name, err)
		return exitError
	}
	switch name {
	case "replay":
		var rep *loop.ReplayReport
		rep, err = Replay(runCtx, ctx, js, subjects, run, ro)
		if rep != nil && err == nil {
			if *asJSON {
				err = json.NewEncoder(stdout).Encode(struct {
					RunID protocol.RunID `json:"run_id"`
					*loop.ReplayReport
				}{run, rep})
			} else {
				printReport(stdout, run, rep)
			}
		}
	case "fork":
		var msgs []loop.Message
		if msgs, err = Fork(ctx, js, subjects, run, *at, more); err == nil {
			err = writeFork(stdout, stderr, *out, run, *at, msgs)
		}
	case "show":
		err = show(ctx, js, subjects, run, *asJSON, stdout)
	case "input":
		mode := protocol.RunInputEnqueue
		if *interrupt {
			mode = protocol.RunInputInterrupt
		}
		if err = Input(ctx, nc, subjects, *client, run, mode, *text); err == nil {
			fmt.Fprintf(stdout, "run %s took the input (%s)\n", run, mode)
		}
	case "cancel", "resume":
		if bulk {
			err = bulkChange(ctx, nc, js, subjects, name, f, *by, *reason, *yes && !*dryRun, stdout)
			break
		}
		err = change(ctx, nc, js, subjects, name, run, *by, *reason, stdout)
	default:
		err = list(ctx, js, subjects, f, *asJSON, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "runs %s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

// resultKey is run's key in the runs bucket: <client>.<run> for a served
// run, whose journal's request entry names the client, else the run id.
func resultKey(run protocol.RunID, recs []natsbus.JournalRecord) string {
	for _, r := range recs {
		if r.Entry.Kind != natsbus.EntryRequest {
			continue
		}
		var req struct {
			Client string `json:"client"`
		}
		if json.Unmarshal(r.Entry.Data, &req) == nil && protocol.ValidToken(req.Client) {
			return protocol.RunKey(req.Client, run)
		}
		break
	}
	return string(run)
}

// state reads one run's state.
func state(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID) (State, error) {
	recs, err := natsbus.ReadJournal(ctx, js, subjects, run)
	if err != nil {
		return State{}, err
	}
	st := Summarize(run, recs)
	if results, err := natsbus.OpenRunResults(ctx, js, subjects); err == nil {
		st.HasResult = results.Has(ctx, resultKey(run, recs))
	}
	if st.Status == StatusRunning {
		if ok, _ := natsbus.CancelRequested(ctx, js, subjects, run); ok {
			st.Status = StatusCancelRequested
		}
	}
	return st, nil
}

func show(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, asJSON bool, w io.Writer) error {
	st, err := state(ctx, js, subjects, run)
	if err != nil {
		return err
	}
	if st.Entries == 0 {
		return fmt.Errorf("run %s has no journal", run)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(st)
	}
	status := st.Status
	if st.Termination != "" {
		status += " (" + string(st.Termination) + ")"
	}
	if st.DryRun {
		status += ", a dry run"
	}
	fmt.Fprintf(w, "run:        %s\nstatus:     %s\nowner:      %s (%d owner(s))\nround:      %d\nlast step:  %s at %s\nresult:     %v\n",
		st.RunID, status, st.Owner, st.Owners, st.Round, st.LastStep, st.LastAt.UTC().Format(time.RFC3339), st.HasResult)
	for _, c := range st.PendingApprovals {
		fmt.Fprintf(w, "awaiting approval: %s %s (until %s)\n", c.CallKey, c.Tool, st.ApprovalDeadline.UTC().Format(time.RFC3339))
	}
	for _, c := range st.PendingCalls {
		fmt.Fprintf(w, "pending call:      %s %s (deadline %s)\n", c.CallKey, c.Tool, c.Deadline.UTC().Format(time.RFC3339))
	}
	return nil
}

func list(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, f Filter, asJSON bool, w io.Writer) error {
	states, err := Select(ctx, js, subjects, f)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(states)
	}
	if len(states) == 0 {
		fmt.Fprintln(w, "no runs with a journal")
		return nil
	}
	return printStates(w, states)
}

// printStates prints one line per run.
func printStates(w io.Writer, states []State) error {
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

func clip(s string) string {
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
