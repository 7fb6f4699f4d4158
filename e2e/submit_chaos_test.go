package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestSubmitChaos is the acceptance test of submission under churn: 200
// runs submitted by "coordinator submit --wait" processes, 24 at a time,
// through three serving coordinators of which a random live one is
// SIGKILLed every 0.5-1.5s and started again, with one period of 5s with
// no coordinator at all. Each run charges once (a non-idempotent exec tool
// that records its call key) and answers. Every submit returns its run's
// result, every run completes exactly once (natural, its charge ok, one
// stored result, no coordinator finding it stored by another), and every
// charge ran at most once: no call key ran twice.
func TestSubmitChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a few minutes of churn")
	}
	// Not parallel: the submitters and the kill loop keep both cores busy.
	const runs, parallel = 200, 24
	f := newFleet(t)
	f.startWorker("w1")
	f.startWorker("w2")
	model := f.writeJSON("chaos-submit.json", map[string]any{"turns": script{
		turn(call("c", toolCharge, map[string]any{"id": "chg", "output": "charged"})),
		final(`done {{result "c"}}`),
	}})
	var mu sync.Mutex
	procs := map[string]*proc{}
	var all []*proc
	start := func(name string) {
		p := startProc(t, name, bins.coordinator, "serve", "--nats-url", f.url(), "--workers", "0",
			"--model", "scripted:"+model, "--name", name, "--run-ack-wait", durableRunAckWait,
			"--max-concurrent-runs", "8", "--shutdown-grace", "5s", "--log-level", "info")
		p.waitLog(30*time.Second, `"serving runs"`)
		mu.Lock()
		procs[name] = p
		all = append(all, p)
		mu.Unlock()
	}
	names := []string{"c1", "c2", "c3"}
	for _, name := range names {
		start(name)
	}
	waitServePulling(t, f, len(names))

	// The kill loop: a random live coordinator every 0.5-1.5s, started
	// again in the background (so more than one may be down at once); at
	// the third kill, all of them for 5s.
	stop := make(chan struct{})
	var kills int
	var outage bool
	var wg, restarts sync.WaitGroup
	down := map[string]bool{}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(24, 2))
		for i := 1; ; i++ {
			select {
			case <-stop:
				restarts.Wait()
				return
			case <-time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond):
			}
			if i == 3 {
				restarts.Wait()
				for _, name := range names {
					mu.Lock()
					p := procs[name]
					mu.Unlock()
					p.kill()
					kills++
				}
				outage = true
				time.Sleep(5 * time.Second) // the fault: no coordinator at all
				for _, name := range names {
					start(name)
				}
				continue
			}
			name := names[rng.IntN(len(names))]
			mu.Lock()
			p, isDown := procs[name], down[name]
			down[name] = true
			mu.Unlock()
			if isDown {
				continue
			}
			p.kill()
			kills++
			restarts.Go(func() {
				start(name)
				mu.Lock()
				down[name] = false
				mu.Unlock()
			})
		}
	})

	// The submitters: each a "coordinator submit --wait" process.
	type outcome struct {
		code   int
		result protocol.RunResult
		out    string
	}
	outcomes := make([]outcome, runs)
	sem := make(chan struct{}, parallel)
	var sub sync.WaitGroup
	for i := range runs {
		sem <- struct{}{}
		sub.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bins.coordinator, "submit", "--nats-url", f.url(), "--wait", "--output", "json",
				"--id", fmt.Sprintf("chaos-%d", i), "--timeout", "2m", "--wait-timeout", "7m", fmt.Sprintf("run %d", i))
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			o := outcome{code: exitCode(err), out: stderr.String()}
			json.Unmarshal(stdout.Bytes(), &o.result)
			outcomes[i] = o
		})
	}
	sub.Wait()
	close(stop)
	wg.Wait()

	for i, o := range outcomes {
		want := protocol.SubmissionRunID("default", fmt.Sprintf("chaos-%d", i))
		if o.code != 0 || o.result.RunID != want || o.result.TerminationReason != "natural" || o.result.Answer != "done charged" {
			t.Errorf("submit %d: exit %d, run %s (want %s), %q %q %+v\n%s", i, o.code, o.result.RunID, want,
				o.result.TerminationReason, o.result.Answer, o.result.Error, tail(o.out, 2000))
		}
	}
	// Every charge ran at most once: one run per call key, one call key
	// per run.
	byKey := map[string]int{}
	data, err := os.ReadFile(f.effects)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 3 && fields[0] == "key" && fields[1] == "chg" {
			byKey[fields[2]]++
		}
	}
	for key, n := range byKey {
		if n != 1 {
			t.Errorf("charge under call key %s ran %d times, want at most once", key, n)
		}
	}
	if len(byKey) != runs {
		t.Errorf("%d charges ran, want one for each of the %d runs", len(byKey), runs)
	}
	// Every run completed once: no coordinator ran one another had
	// finished.
	again, attempts := 0, 0
	for _, p := range all {
		again += strings.Count(p.log(), "another coordinator stored this run's result first")
		attempts += strings.Count(p.log(), "resuming the run from its journal")
	}
	if again != 0 {
		t.Errorf("%d runs finished by a second coordinator after another had stored their result", again)
	}
	if !outage {
		t.Error("the period with no coordinator never happened")
	}
	t.Logf("%d runs, %d coordinators killed (one 5s period with none), %d runs resumed from their journal", runs, kills, attempts)
}
