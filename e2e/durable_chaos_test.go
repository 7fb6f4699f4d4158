package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// chaosModel is a deterministic OpenAI-compatible model: its answer
// depends only on the transcript. A run prompted "run K" charges (K-a),
// then works (K-w, idempotent) and charges again (K-b) at once, then
// answers. It counts the requests of each run's rounds.
type chaosModel struct {
	mu    sync.Mutex
	asked map[string]int // "K/round" -> requests
	// hang, when set, is asked first: true makes the request hang until
	// the client goes away.
	hang func(run string, round, n int) bool
}

func (m *chaosModel) handle(_ int, req *openaitest.Request) openaitest.Reply {
	run, tools := "", 0
	for _, msg := range req.Messages {
		switch msg.Role {
		case "user":
			if run == "" {
				run = strings.TrimPrefix(msg.Text(), "run ")
			}
		case "tool":
			tools++
		}
	}
	arg := func(v map[string]any) string { b, _ := json.Marshal(v); return string(b) }
	tc := func(id, tool string, args map[string]any) loop.ToolCall {
		return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: tool, Arguments: arg(args)}}
	}
	var rep openaitest.Reply
	round := 0
	switch tools {
	case 0:
		round = 1
		rep.ToolCalls = []loop.ToolCall{tc("a", toolCharge, map[string]any{"id": run + "-a", "output": "a" + run})}
	case 1:
		round = 2
		rep.ToolCalls = []loop.ToolCall{
			tc("w", toolWork, map[string]any{"id": run + "-w", "sleep_ms": 800, "output": "w" + run}),
			tc("b", toolCharge, map[string]any{"id": run + "-b", "sleep_ms": 600, "output": "b" + run}),
		}
	default:
		round = 3
		rep.Content = "done " + run
	}
	m.mu.Lock()
	key := fmt.Sprintf("%s/%d", run, round)
	m.asked[key]++
	n, hang := m.asked[key], m.hang
	m.mu.Unlock()
	if hang != nil && hang(run, round, n) {
		return openaitest.Reply{Hang: true}
	}
	return rep
}

// calls returns the requests made and the rounds asked more than once.
func (m *chaosModel) calls() (made int, repeated map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	repeated = map[string]int{}
	for k, n := range m.asked {
		made += n
		if n > 1 {
			repeated[k] = n
		}
	}
	return made, repeated
}

// servingFleet is a fleet with n serving coordinators on the chaos model.
type servingFleet struct {
	*fleet
	model *chaosModel
	url   string
	mu    sync.Mutex
	procs map[string]*proc
	all   []*proc
}

func newServingFleet(t *testing.T, coordinators int) *servingFleet {
	return newServingFleetWith(t, coordinators, &chaosModel{asked: map[string]int{}})
}

func newServingFleetWith(t *testing.T, coordinators int, model *chaosModel) *servingFleet {
	f := &servingFleet{fleet: newFleet(t), model: model, procs: map[string]*proc{}}
	srv := openaitest.NewServer(t, f.model.handle)
	f.url = srv.URL
	f.startWorker("w1")
	f.startWorker("w2")
	for i := range coordinators {
		f.restart(fmt.Sprintf("c%d", i+1))
	}
	waitServePulling(t, f.fleet, coordinators)
	return f
}

// restart starts (again) the coordinator named name.
func (f *servingFleet) restart(name string) {
	p := startProc(f.t, name, bins.coordinator, "serve", "--nats-url", f.fleet.url(), "--workers", "0",
		"--model", "openai:chaos", "--model-base-url", f.url, "--name", name,
		"--run-ack-wait", durableRunAckWait, "--max-concurrent-runs", "4", "--shutdown-grace", "20s",
		"--log-level", "info")
	p.waitLog(30*time.Second, `"serving runs"`)
	f.mu.Lock()
	f.procs[name] = p
	f.all = append(f.all, p)
	f.mu.Unlock()
}

func (f *servingFleet) proc(name string) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[name]
}

// submitAll submits "run 0" .. "run n-1".
func (f *servingFleet) submitAll(n int) []protocol.RunID {
	runs := make([]protocol.RunID, n)
	for i := range runs {
		runs[i] = f.submitRun(fmt.Sprintf("run %d", i))
	}
	return runs
}

// checkAll waits for every run's result and checks it: natural, with its
// own answer, every call ok; every charge of every run ran exactly once.
func (f *servingFleet) checkAll(runs []protocol.RunID) (cancelled int) {
	f.t.Helper()
	for i, run := range runs {
		res, _, calls := f.runResult(run, 120*time.Second)
		if res.TerminationReason == "cancelled" {
			cancelled++
		}
		if res.TerminationReason != "natural" || res.Answer != fmt.Sprintf("done %d", i) {
			f.t.Errorf("run %d (%s): %s %q %+v", i, run, res.TerminationReason, res.Answer, res.Error)
			continue
		}
		for _, c := range calls {
			if c.Outcome != protocol.OutcomeOK {
				f.t.Errorf("run %d: call %s: %s", i, c.CallID, c.Outcome)
			}
		}
		for _, id := range []string{"-a", "-b"} {
			if n := len(f.runsOf(fmt.Sprint(i) + id)); n != 1 {
				f.t.Errorf("run %d: charge %s ran %d times, want exactly once", i, id, n)
			}
		}
		if n := len(f.runsOf(fmt.Sprint(i) + "-w")); n < 1 {
			f.t.Errorf("run %d: work never ran", i)
		}
	}
	return cancelled
}

// TestDurableChaos runs 100 runs of three rounds through three serving
// coordinators while a loop SIGKILLs a random one every 0.5-1.5s and starts
// it again. Every run finishes natural with its own answer, every charge
// (non-idempotent) ran exactly once, and no run is lost; the test reports
// the model calls made against the calls needed.
func TestDurableChaos(t *testing.T) {
	// Not parallel: a hundred runs and a kill loop keep both cores busy, and
	// would starve another test's heartbeats.
	const runs, rounds = 100, 3
	f := newServingFleet(t, 3)
	ids := f.submitAll(runs)
	stop := make(chan struct{})
	var kills int
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(12, 12))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond):
			}
			name := fmt.Sprintf("c%d", 1+rng.IntN(3))
			f.proc(name).kill()
			kills++
			f.restart(name)
		}
	})
	f.checkAll(ids)
	close(stop)
	wg.Wait()
	made, repeated := f.model.calls()
	t.Logf("%d coordinators killed; model calls made %d, needed %d; rounds asked again (in flight at a kill): %v",
		kills, made, runs*rounds, repeated)
	for k, n := range repeated {
		if n > 1+kills {
			t.Errorf("round %s asked %d times with %d kills", k, n, kills)
		}
	}
}

// TestDurableRollingRestart restarts every serving coordinator under load,
// one at a time (SIGTERM, wait for it to exit, start it again): the runs in
// flight are handed off, never cancelled, and every charge ran once.
func TestDurableRollingRestart(t *testing.T) {
	t.Parallel()
	const runs = 24
	f := newServingFleet(t, 3)
	ids := f.submitAll(runs)
	for _, name := range []string{"c1", "c2", "c3"} {
		p := f.proc(name)
		p.stop(30 * time.Second)
		if !strings.Contains(p.log(), "stopped serving runs") {
			t.Fatalf("%s did not stop cleanly", name)
		}
		f.restart(name)
	}
	if cancelled := f.checkAll(ids); cancelled != 0 {
		t.Fatalf("%d runs cancelled by the rolling restart", cancelled)
	}
	handedOff := 0
	for _, p := range f.all {
		handedOff += strings.Count(p.log(), "run handed off at a step boundary")
	}
	made, _ := f.model.calls()
	t.Logf("%d runs handed off; model calls made %d, needed %d", handedOff, made, runs*3)
}

// TestDurableKilledMidModelCall kills the owning coordinator while its
// second round's model call is in flight (the fake model holds it): the
// coordinator that takes the run asks that round again — the only round
// asked twice — and nothing else is repeated.
func TestDurableKilledMidModelCall(t *testing.T) {
	t.Parallel()
	inFlight := make(chan struct{})
	var once sync.Once
	model := &chaosModel{asked: map[string]int{}, hang: func(_ string, round, n int) bool {
		if round == 2 && n == 1 {
			once.Do(func() { close(inFlight) })
			return true
		}
		return false
	}}
	f := newServingFleetWith(t, 1, model)
	ids := f.submitAll(1)
	select {
	case <-inFlight:
	case <-time.After(60 * time.Second):
		t.Fatal("round 2's model call never started")
	}
	f.proc("c1").kill()
	f.restart("c2")
	f.checkAll(ids)
	_, repeated := f.model.calls()
	if len(repeated) != 1 || repeated["0/2"] != 2 {
		t.Fatalf("rounds asked more than once: %v, want only round 2, twice", repeated)
	}
}
