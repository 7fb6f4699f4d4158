package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// serveCeilingRounds is the served coordinators' --max-rounds; their model
// wants more rounds than that, so every run ends at the ceiling.
const serveCeilingRounds = 3

// serveMaxRequestBytes is the served coordinators' --max-request-bytes.
const serveMaxRequestBytes = 64 << 10

// TestServeFleet is the acceptance test of "coordinator serve": two serving
// coordinators and two toolworkers, as separate processes on one
// nats-server, take 40 submitted runs — by the Go client, by "nats req" and
// by "coordinator submit". Every run gets exactly one result (stored once,
// announced once), both coordinators run some of them, a request for
// max_rounds 1000000 is clamped to the ceiling, "nats req" sent twice with
// one Nats-Msg-Id is stored once, and malformed or oversized requests get a
// stored result saying why and never stay in the runs stream.
func TestServeFleet(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	natsBin := natscli.Path(t)
	// The workers' ack wait is long: this test counts the runs of an
	// idempotent tool, and a worker starved past the suite's 2s (the tests
	// run in parallel) would have a call redelivered and run again.
	f.startWorker("sw1", "--ack-wait", "10s")
	f.startWorker("sw2", "--ack-wait", "10s")

	// Five rounds of one "work" call each, then an answer: more rounds than
	// the ceiling allows.
	var turns script
	for i := range 5 {
		turns = append(turns, turn(call(fmt.Sprintf("w%d", i), toolWork, map[string]any{"id": fmt.Sprintf("served%d", i), "sleep_ms": 30})))
	}
	turns = append(turns, final(`done: {{result "w4"}}`))
	model := f.writeJSON("serve-script.json", map[string]any{"turns": turns})
	servers := map[string]*proc{}
	for _, name := range []string{"serve1", "serve2"} {
		servers[name] = startProc(t, name, bins.coordinator, "serve", "--nats-url", f.url(), "--workers", "0",
			"--model", "scripted:"+model, "--name", name, "--max-concurrent-runs", "4",
			"--max-rounds", fmt.Sprint(serveCeilingRounds), "--max-request-bytes", fmt.Sprint(serveMaxRequestBytes),
			"--shutdown-grace", "10s", "--log-level", "debug")
	}
	for _, p := range servers {
		p.waitLog(20*time.Second, `"serving runs"`)
	}
	waitServePulling(t, f, 2)

	announced := map[string]int{}
	var mu sync.Mutex
	sub, err := f.nc.Subscribe("fleet.run.result.>", func(m *nats.Msg) {
		mu.Lock()
		announced[strings.TrimPrefix(m.Subject, "fleet.run.result.")]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// 38 runs from the Go client, at once.
	const total = 40
	runs := make([]string, 0, total)
	ids := make([]string, total-2)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			resp, err := coordinator.SubmitRaw(t.Context(), f.nc, protocol.Subjects{}, []byte(fmt.Sprintf(`{"prompt": "run %d"}`, i)))
			if err != nil || resp.Status != protocol.RunAccepted {
				t.Errorf("submit %d: %+v, %v", i, resp, err)
				return
			}
			ids[i] = resp.ResultKey
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	runs = append(runs, ids...)

	// One from the nats CLI, asking for a million rounds.
	// The reply is the server's acknowledgement; the result's key is
	// derived from the client and the submission id.
	clampID, agent := "Nats-Msg-Id:"+protocol.SubmissionMsgID("default", "clamp1"), protocol.HeaderAgent+":"+protocol.DefaultAgent
	out := serveNatsReq(t, natsBin, f.url(), "fleet.run.submit.default.default.clamp1", `{"prompt": "as long as you like", "max_rounds": 1000000}`, clampID, agent)
	var ack struct {
		Stream string
		Seq    uint64
	}
	if err := json.Unmarshal([]byte(out), &ack); err != nil || ack.Stream != "FLEET_RUNS" || ack.Seq == 0 {
		t.Fatalf("nats req reply = %s (%v), want the FLEET_RUNS acknowledgement", out, err)
	}
	// The same request again, as a client that saw no reply would send it:
	// the server keeps one.
	if again := serveNatsReq(t, natsBin, f.url(), "fleet.run.submit.default.default.clamp1", `{"prompt": "as long as you like", "max_rounds": 1000000}`, clampID, agent); !strings.Contains(strings.ReplaceAll(again, " ", ""), `"duplicate":true`) {
		t.Fatalf("nats req again = %s, want a duplicate", again)
	}
	clampedRun := protocol.RunKey("default", protocol.SubmissionRunID("default", "clamp1"))
	runs = append(runs, clampedRun)

	// One from "coordinator submit --wait", which prints the result.
	cmd := exec.CommandContext(t.Context(), bins.coordinator, "submit", "--nats-url", f.url(), "--wait",
		"--output", "json", "--wait-timeout", "60s", "from the command line")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	stdout, err := cmd.Output()
	var viaCLI protocol.RunResult
	if code := exitCode(err); code != 3 || json.Unmarshal(stdout, &viaCLI) != nil || viaCLI.RunID == "" {
		t.Fatalf("coordinator submit --wait: exit %d (want 3, max rounds), stdout:\n%s", code, stdout)
	}
	runs = append(runs, protocol.RunKey("default", viaCLI.RunID))

	// Every run has exactly one result, stored under its id.
	byCoordinator := map[string]int{}
	for _, run := range runs {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, run)
		cancel()
		if err != nil {
			t.Fatalf("run %s: %v", run, err)
		}
		if protocol.RunKey("default", res.RunID) != run || res.Error != nil || res.TerminationReason != "max_rounds" || res.Attempt != 1 ||
			res.Limits == nil || res.Limits.MaxRounds != serveCeilingRounds {
			t.Fatalf("run %s: result %+v, want max_rounds at the ceiling on the first attempt", run, res)
		}
		var md struct{ Rounds int }
		if err := json.Unmarshal(res.Metadata, &md); err != nil || md.Rounds != serveCeilingRounds {
			t.Fatalf("run %s: %d rounds (%v), want %d", run, md.Rounds, err, serveCeilingRounds)
		}
		wantClamped := []string(nil)
		if run == clampedRun {
			wantClamped = []string{"max_rounds"}
		}
		if !slices.Equal(res.Clamped, wantClamped) {
			t.Fatalf("run %s: clamped %v, want %v", run, res.Clamped, wantClamped)
		}
		byCoordinator[res.Coordinator]++
	}
	if len(byCoordinator) != 2 || byCoordinator["serve1"] == 0 || byCoordinator["serve2"] == 0 {
		t.Fatalf("runs by coordinator = %v, want both serve1 and serve2 to have run some", byCoordinator)
	}
	t.Logf("runs by coordinator: %v", byCoordinator)
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(announced) != total {
			return fmt.Errorf("%d runs announced, want %d", len(announced), total)
		}
		return nil
	})
	mu.Lock()
	for _, run := range runs {
		if announced[run] != 1 {
			t.Errorf("run %s announced %d times, want once", run, announced[run])
		}
	}
	mu.Unlock()
	// Each run took 3 work calls, each run once.
	if n := len(f.runs()); n != total*serveCeilingRounds {
		t.Errorf("the work tool ran %d times, want %d", n, total*serveCeilingRounds)
	}

	// Refused requests: stored, then a clear error result.
	for i, tt := range []struct {
		name, body, code string
	}{
		{"malformed", `this is not JSON`, protocol.CodeMalformed},
		{"unknown field", `{"prompt": "hi", "max_round": 3}`, protocol.CodeMalformed},
		{"oversized", `{"prompt": "` + strings.Repeat("x", serveMaxRequestBytes) + `"}`, protocol.CodeTooLarge},
		{"negative limit", `{"prompt": "hi", "max_tool_calls_per_round": -1}`, protocol.CodeInvalidField},
	} {
		id := fmt.Sprintf("refused%d", i)
		serveNatsReq(t, natsBin, f.url(), "fleet.run.submit.default.default."+id, tt.body, "Nats-Msg-Id:"+protocol.SubmissionMsgID("default", id), agent)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		refused, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, protocol.RunKey("default", protocol.SubmissionRunID("default", id)))
		cancel()
		if err != nil || refused.TerminationReason != "" || refused.Error == nil || refused.Error.Code != tt.code || refused.Error.Message == "" {
			t.Errorf("%s: result %+v (%v), want refused with code %s and a message", tt.name, refused, err, tt.code)
		}
	}
	const refusedN = 4
	// A malformed request put straight into the stream, past the checks,
	// gets an error result and is terminated: never delivered again.
	forgedMsg := nats.NewMsg("fleet.run.submit.default.default.forged1")
	forgedMsg.Data = []byte(`{"prompt": 42}`)
	forgedMsg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("default", "forged1"))
	forgedMsg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	if _, err := f.js.PublishMsg(t.Context(), forgedMsg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	forged, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, protocol.RunKey("default", protocol.SubmissionRunID("default", "forged1")))
	cancel()
	if err != nil || forged.Error == nil || forged.Error.Code != protocol.CodeMalformed || forged.TerminationReason != "" {
		t.Fatalf("forged request: result %+v, %v; want a malformed error result", forged, err)
	}
	// The forged request is terminated after its result is stored: wait
	// for the server to have removed it.
	natstest.WaitFor(t, 10*time.Second, func() error {
		st, err := f.js.Stream(t.Context(), "FLEET_RUNS")
		if err != nil {
			return err
		}
		info, err := st.Info(t.Context())
		if err != nil {
			return err
		}
		if info.State.LastSeq != total+refusedN+1 || info.State.Msgs != 0 {
			return fmt.Errorf("runs stream: %d stored in all, %d left; want the %d accepted, %d refused and the forged one, none left",
				info.State.LastSeq, info.State.Msgs, total, refusedN)
		}
		return nil
	})
	natstest.WaitFor(t, 10*time.Second, func() error {
		c, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
		if err != nil {
			return err
		}
		ci, err := c.Info(t.Context())
		if err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 || ci.NumRedelivered != 0 || ci.Delivered.Consumer != total+refusedN+1 {
			return fmt.Errorf("runs consumer: %d waiting, %d unacknowledged, %d redelivered, %d delivered; want each request delivered once",
				ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered.Consumer)
		}
		return nil
	})

	// SIGTERM: both stop cleanly.
	for name, p := range servers {
		p.stop(15 * time.Second)
		if code := p.wait(time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", name, code)
		}
		if !strings.Contains(p.log(), `"stopped serving runs"`) {
			t.Errorf("%s did not log its shutdown", name)
		}
	}
}

// waitServePulling waits until n coordinators wait for run requests.
func waitServePulling(t *testing.T, f *fleet, n int) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		c, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
		if err != nil {
			return err
		}
		info, err := c.Info(t.Context())
		if err != nil {
			return err
		}
		if info.NumWaiting < n {
			return fmt.Errorf("%d pull requests waiting, want %d", info.NumWaiting, n)
		}
		return nil
	})
}

// serveNatsReq runs "nats req SUBJECT BODY" and returns the reply.
func serveNatsReq(t *testing.T, natsBin, url, subject, body string, headers ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	args := []string{"--server", url, "req", "--raw", subject, body}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	cmd := exec.CommandContext(ctx, natsBin, args...)
	cmd.Env = natscli.Env(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nats req: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// exitCode is the exit status carried by err from exec.Cmd.Run or Output.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// TestServeSurvivesACoordinatorKill SIGKILLs one of two serving
// coordinators while it runs: its runs are taken again by the other one
// after --run-ack-wait and started over, and every run still gets exactly
// one result.
func TestServeSurvivesACoordinatorKill(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("kw1")
	var turns script
	for i := range 3 {
		turns = append(turns, turn(call(fmt.Sprintf("w%d", i), toolWork, map[string]any{"id": fmt.Sprintf("k%d", i), "sleep_ms": 300})))
	}
	turns = append(turns, final("done"))
	model := f.writeJSON("kill-script.json", map[string]any{"turns": turns})
	start := func(name string) *proc {
		p := startProc(t, name, bins.coordinator, "serve", "--nats-url", f.url(), "--workers", "0",
			"--model", "scripted:"+model, "--name", name, "--max-concurrent-runs", "4", "--run-ack-wait", "1s",
			"--log-level", "debug")
		p.waitLog(20*time.Second, `"serving runs"`)
		return p
	}
	victim := start("victim")
	waitServePulling(t, f, 1)

	const n = 4
	runs := make([]string, n)
	for i := range runs {
		resp, err := coordinator.SubmitRaw(t.Context(), f.nc, protocol.Subjects{}, []byte(fmt.Sprintf(`{"prompt": "run %d"}`, i)))
		if err != nil || resp.Status != protocol.RunAccepted {
			t.Fatalf("submit: %+v, %v", resp, err)
		}
		runs[i] = resp.ResultKey
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := len(victim.logLines(func(m map[string]any) bool { return m["message"] == "run started" })); got < n {
			return fmt.Errorf("the victim started %d runs, want %d", got, n)
		}
		return nil
	})
	victim.kill()
	start("survivor")

	for _, run := range runs {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, run)
		cancel()
		if err != nil {
			t.Fatalf("run %s: %v", run, err)
		}
		if res.Coordinator != "survivor" || res.Attempt != 2 || res.TerminationReason != "natural" || res.Answer != "done" {
			t.Fatalf("run %s: coordinator %q attempt %d reason %q; want the survivor's second attempt to finish",
				run, res.Coordinator, res.Attempt, res.TerminationReason)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		c, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
		if err != nil {
			return err
		}
		ci, err := c.Info(t.Context())
		if err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 {
			return fmt.Errorf("runs consumer: %d waiting, %d unacknowledged", ci.NumPending, ci.NumAckPending)
		}
		return nil
	})
}
