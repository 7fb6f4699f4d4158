package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The exec tools every fleet serves. Both run sidefx; "work" is idempotent
// (at least once: redelivered after a worker dies), "charge" is not (at most
// once: acknowledged before it runs).
const (
	toolWork   = "work"
	toolCharge = "charge"
)

// testAckWait is the workers' --ack-wait in these tests: a dead worker's
// idempotent call is redelivered 2s after its last heartbeat (every third of
// it), and a live worker has three heartbeats' slack on a loaded machine.
// Production keeps the 5s default.
const testAckWait = 2 * time.Second

// sidefxSchema is the parameter schema of the sidefx tools.
const sidefxSchema = `{"type":"object","properties":{` +
	`"id":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,40}$"},` +
	`"sleep_ms":{"type":"integer","minimum":0,"maximum":60000},` +
	`"exit":{"type":"integer","minimum":0,"maximum":255},` +
	`"output":{"type":"string","maxLength":1000}},` +
	`"required":["id"],"additionalProperties":false}`

// fleet is a nats-server in this process, a tool manifest whose exec tools
// record their runs in one file, and the processes started against them.
type fleet struct {
	t        *testing.T
	srv      *embedded.Server // nil on a cluster
	urls     string
	dir      string
	effects  string // the sidefx log
	manifest string
	nc       *nats.Conn
	js       jetstream.JetStream
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	return newFleetOn(t, natstest.Start(t))
}

// newFleetOn is newFleet on a server the test started (a hub, say).
func newFleetOn(t *testing.T, srv *embedded.Server) *fleet {
	t.Helper()
	f := newFleetAt(t, srv.ClientURL())
	f.srv = srv
	return f
}

// newFleetAt is newFleet on the servers at urls (comma-separated: a
// cluster), which the test started; f.srv is nil.
func newFleetAt(t *testing.T, urls string) *fleet {
	t.Helper()
	f := &fleet{t: t, urls: urls, dir: t.TempDir()}
	f.effects = filepath.Join(f.dir, "effects.log")
	tool := func(name string, idempotent bool) map[string]any {
		return map[string]any{
			"name": name, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
			"timeout": "30s", "command": []string{bins.sidefx}, "idempotent": idempotent,
			"env": map[string]string{"SIDEFX_LOG": f.effects},
		}
	}
	f.manifest = f.writeJSON("tools.json", map[string]any{"tools": []any{
		tool(toolWork, true), tool(toolCharge, false),
	}})
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f.nc = nc
	if f.js, err = jetstream.New(f.nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.killStrayTools)
	return f
}

// url is the server's client URL.
func (f *fleet) url() string {
	if f.srv != nil {
		return f.srv.ClientURL() // a restarted server keeps its port
	}
	return f.urls
}

// writeJSON writes v as JSON to the fleet's directory.
func (f *fleet) writeJSON(name string, v any) string {
	f.t.Helper()
	return writeJSON(f.t, f.dir, name, v)
}

// writeJSON writes v as JSON to dir/name and returns the path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startWorker starts a toolworker serving the manifest's tools (and echo)
// and waits until it serves.
func (f *fleet) startWorker(name string, extra ...string) *proc {
	f.t.Helper()
	args := append([]string{"--nats-url", f.url(), "--tools", f.manifest, "--builtin", "echo",
		"--name", name, "--ack-wait", testAckWait.String(), "--log-level", "debug"}, extra...)
	p := startProc(f.t, name, bins.toolworker, args...)
	p.waitLog(time.Minute, "worker started") // a condition: generous for a loaded machine, free otherwise
	return p
}

// script is a scripted model's turns.
type script []map[string]any

// call is one scripted tool call.
func call(id, tool string, args map[string]any) map[string]any {
	return map[string]any{"id": id, "name": tool, "arguments": args}
}

// turn is a scripted assistant message with tool calls.
func turn(calls ...map[string]any) map[string]any {
	return map[string]any{"tool_calls": calls}
}

// final is a scripted final answer.
func final(text string) map[string]any { return map[string]any{"content": text} }

// coordinator starts "coordinator run" on the remote fleet with the script
// as its model and JSON output.
func (f *fleet) coordinator(name string, s script, extra ...string) *proc {
	f.t.Helper()
	return f.coordinatorAt(f.url(), name, s, extra...)
}

// coordinatorAt is coordinator with another server URL (a proxy's).
func (f *fleet) coordinatorAt(url, name string, s script, extra ...string) *proc {
	f.t.Helper()
	file := f.writeJSON(name+"-script.json", map[string]any{"turns": s})
	args := append([]string{"run", "--nats-url", url, "--workers", "0", "--model", "scripted:" + file,
		"--output", "json", "--log-level", "debug"}, extra...)
	return startProc(f.t, name, bins.coordinator, append(args, "e2e prompt")...)
}

// consumerInfo returns the shared consumer of tool, waiting up to a
// minute for its leader to answer (a node may just have restarted).
func (f *fleet) consumerInfo(tool string) *jetstream.ConsumerInfo {
	f.t.Helper()
	return natstest.ConsumerInfo(f.t, f.js, protocol.Subjects{}.CallsStream(), "tool_"+tool, time.Minute)
}

// callsStored is how many messages the calls stream has ever stored (its
// last sequence: a work queue removes the calls it delivered and settled).
// It waits up to a minute for the stream's leader to answer.
func (f *fleet) callsStored() uint64 {
	f.t.Helper()
	return natstest.StreamInfo(f.t, f.js, protocol.Subjects{}.CallsStream(), time.Minute).State.LastSeq
}

// waitDrained waits until tool's consumer has nothing waiting and nothing
// delivered but unacknowledged: no call of it will ever be delivered again.
func (f *fleet) waitDrained(tool string, timeout time.Duration) {
	f.t.Helper()
	natstest.WaitFor(f.t, timeout, func() error {
		info := f.consumerInfo(tool)
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("consumer of %s: %d waiting, %d unacknowledged", tool, info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

// toolRun is one sidefx run read back from the effects log.
type toolRun struct {
	id        string
	pid, ppid int
	done      bool
}

// runs returns the sidefx runs recorded so far, in start order.
func (f *fleet) runs() []toolRun {
	f.t.Helper()
	data, err := os.ReadFile(f.effects)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	var out []toolRun
	byPID := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 4 && fields[0] == "start":
			pid, _ := strconv.Atoi(fields[2])
			ppid, _ := strconv.Atoi(fields[3])
			byPID[pid] = len(out)
			out = append(out, toolRun{id: fields[1], pid: pid, ppid: ppid})
		case len(fields) == 3 && fields[0] == "done":
			pid, _ := strconv.Atoi(fields[2])
			if i, ok := byPID[pid]; ok {
				out[i].done = true
			}
		}
	}
	return out
}

// runsOf returns the recorded runs of one call.
func (f *fleet) runsOf(id string) []toolRun {
	var out []toolRun
	for _, r := range f.runs() {
		if r.id == id {
			out = append(out, r)
		}
	}
	return out
}

// waitStarted waits until the call id has started n times and returns its
// runs.
func (f *fleet) waitStarted(id string, n int, timeout time.Duration) []toolRun {
	f.t.Helper()
	var got []toolRun
	natstest.WaitFor(f.t, timeout, func() error {
		if got = f.runsOf(id); len(got) < n {
			return fmt.Errorf("call %s started %d times, want %d", id, len(got), n)
		}
		return nil
	})
	return got
}

// killStrayTools kills the process groups of sidefx runs that are still
// alive when the test ends (a tool whose worker was SIGKILLed may outlive
// it).
func (f *fleet) killStrayTools() {
	for _, r := range f.runs() {
		if !r.done && processAlive(r.pid) && isSidefx(r.pid) {
			syscall.Kill(-r.pid, syscall.SIGKILL)
		}
	}
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	// A zombie still answers signal 0; it has finished running.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) && data[i+2] == 'Z' {
		return false
	}
	return true
}

func isSidefx(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(data, []byte("sidefx"))
}

// proc is a child process whose stdout is kept in memory and whose stderr
// (its JSON log) goes to a file.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdout testsync.Buffer
	stderr string // path of the log file
	done   chan struct{}
	err    error
}

// startProc starts bin with a clean environment. When the test ends the
// process is stopped (SIGTERM, then SIGKILL), and its log is checked for
// data races and printed if the test failed.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, name, nil, bin, args...)
}

// startProcEnv is startProc with more environment variables.
func startProcEnv(t *testing.T, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{}),
		stderr: filepath.Join(t.TempDir(), name+".log")}
	logFile, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	logFile.Close()
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		log := p.log()
		if strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race:\n%s", name, log)
		} else if t.Failed() {
			t.Logf("%s log:\n%s", name, tail(log, 30000))
		}
	})
	return p
}

// stop sends SIGTERM and waits up to timeout, then SIGKILLs.
func (p *proc) stop(timeout time.Duration) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// signal sends sig.
func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signalling %s: %v", p.name, err)
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %v", p.name, timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	default:
		p.t.Fatalf("%s: %v", p.name, p.err)
		return -1
	}
}

// log returns what the process logged so far.
func (p *proc) log() string {
	data, _ := os.ReadFile(p.stderr)
	return string(data)
}

// waitLog waits until the log holds every one of subs.
func (p *proc) waitLog(timeout time.Duration, subs ...string) {
	p.t.Helper()
	natstest.WaitFor(p.t, timeout, func() error {
		log := p.log()
		for _, s := range subs {
			if !strings.Contains(log, s) {
				if p.exited() {
					p.t.Fatalf("%s exited before logging %q", p.name, s)
				}
				return fmt.Errorf("%s has not logged %q", p.name, s)
			}
		}
		return nil
	})
}

// logLines returns the log's JSON lines for which match returns true.
func (p *proc) logLines(match func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && match(m) {
			out = append(out, m)
		}
	}
	return out
}

// result waits for a coordinator to exit with status want and decodes its
// JSON result.
func (p *proc) result(timeout time.Duration, want int) *loop.Result {
	p.t.Helper()
	if code := p.wait(timeout); code != want {
		p.t.Fatalf("%s exited %d, want %d; stdout:\n%s", p.name, code, want, p.stdout.String())
	}
	var r loop.Result
	dec := json.NewDecoder(strings.NewReader(p.stdout.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		p.t.Fatalf("%s stdout is not the JSON result: %v\n%s", p.name, err, p.stdout.String())
	}
	return &r
}

// answered checks docs/design.md §1.1 on a result: every tool call id of every
// assistant message is answered exactly once, right after it and in
// request order, and has exactly one call record, in the same order. It
// returns the records and observations by call id.
func answered(t *testing.T, r *loop.Result) (map[string]loop.CallRecord, map[string]string) {
	t.Helper()
	var ids []string
	obs := map[string]string{}
	msgs := r.Messages
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == "tool" {
			t.Fatalf("message %d: tool message for %q answers no open call", i, m.ToolCallID)
		}
		for j, tc := range m.ToolCalls {
			k := i + 1 + j
			if k >= len(msgs) || msgs[k].Role != "tool" || msgs[k].ToolCallID != tc.ID {
				t.Fatalf("message %d: tool call %q (#%d) is not answered in order", i, tc.ID, j)
			}
			if _, dup := obs[tc.ID]; dup {
				t.Fatalf("tool call id %q appears twice in the transcript", tc.ID)
			}
			obs[tc.ID] = msgs[k].Content
			ids = append(ids, tc.ID)
		}
		i += len(m.ToolCalls)
	}
	if len(r.Calls) != len(ids) {
		t.Fatalf("%d call records for %d tool call ids", len(r.Calls), len(ids))
	}
	recs := make(map[string]loop.CallRecord, len(ids))
	for i, c := range r.Calls {
		if c.CallID != ids[i] {
			t.Fatalf("call record %d is for %q, want %q", i, c.CallID, ids[i])
		}
		recs[c.CallID] = c
	}
	total := 0
	for _, n := range r.Metadata.Outcomes {
		total += n
	}
	if total != len(ids) {
		t.Fatalf("metadata counts %d outcomes for %d call ids", total, len(ids))
	}
	return recs, obs
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// nextResult reads results from sub until one satisfies match.
func nextResult(t *testing.T, sub *nats.Subscription, timeout time.Duration, match func(protocol.Result) bool) protocol.Result {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no matching result within %v: %v", timeout, err)
		}
		results, _ := protocol.DecodeStoredResults(m.Header.Get(protocol.HeaderResultBatch), m.Data, 0)
		for _, r := range results {
			if match(r) {
				return r
			}
		}
	}
}

// storedResults counts the results stored in the results stream for one
// call of a run.
func storedResults(t *testing.T, f *fleet, run protocol.RunID, key protocol.CallKey) int {
	t.Helper()
	subject, err := protocol.Subjects{}.ResultsOf(run)
	if err != nil {
		t.Fatal(err)
	}
	// A node may just have restarted: wait for the stream to answer.
	var cons jetstream.Consumer
	var info *jetstream.ConsumerInfo
	natstest.WaitFor(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c, err := f.js.OrderedConsumer(ctx, protocol.Subjects{}.ResultsStream(),
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		if err == nil {
			info, err = c.Info(ctx)
		}
		if err != nil {
			return fmt.Errorf("waiting for the results stream to answer (a leader) to read %s: %w", subject, err)
		}
		cons = c
		return nil
	})
	n := 0
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading the results stream: %v", err)
		}
		results, _ := protocol.DecodeStoredResults(m.Headers().Get(protocol.HeaderResultBatch), m.Data(), 0)
		for _, r := range results {
			if r.CallKey == key {
				n++
			}
		}
	}
	return n
}
