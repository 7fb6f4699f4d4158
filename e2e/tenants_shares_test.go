package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	tfclient "github.com/toolfleet/toolfleet/pkg/client"
)

// TestSecondClientIsServedWithinItsShare: two client accounts of the
// shipped configuration (client, and bob added as the conf says), one
// fleet of real processes — "coordinator serve", one toolworker of
// concurrency 1 serving the slow exec tool "work" — provisioned with
// "coordinator provision --max-calls-per-client 2". client submits 8 runs
// of the agent "flood", each of which calls "work" for 1.5s; once the tool
// is busy with them, bob runs "coordinator submit --wait" of the agent
// "quick", which calls "work" once. bob's run finishes with its answer,
// and bob's call started while some of client's calls had not: it waited
// behind client's share (docs/operations.md, "Fair shares per client"),
// not behind client's backlog — without the share, the tool's first-in,
// first-out consumer would have run all 8 first. Every run of client
// finishes too.
func TestSecondClientIsServedWithinItsShare(t *testing.T) {
	t.Parallel()
	const (
		share = 2
		flood = 8
	)
	srv := startServerWithBob(t)
	url := srv.ClientURL()
	provision := exec.CommandContext(t.Context(), bins.coordinator, "provision", "--nats-url", url, "--max-calls-per-client", fmt.Sprint(share))
	provision.Env = approvalEnv(t, url, "admin")
	if out, err := provision.CombinedOutput(); err != nil {
		t.Fatalf("coordinator provision --max-calls-per-client: %v\n%s", err, out)
	}

	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, effects: filepath.Join(dir, "effects.log")}
	t.Cleanup(f.killStrayTools)
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{map[string]any{
		"name": toolWork, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
		"timeout": "60s", "command": []string{bins.sidefx}, "idempotent": true,
		"env": map[string]string{"SIDEFX_LOG": f.effects},
	}}})
	for name, args := range map[string]string{"flood": `{"id":"a","sleep_ms":1500}`, "quick": `{"id":"b","sleep_ms":0}`} {
		def := writeJSON(t, dir, name+".json", map[string]any{
			"name":  name,
			"tools": []string{toolWork},
			"model": map[string]any{"provider": "scripted", "script": json.RawMessage(`{"turns":[` +
				`{"tool_calls":[{"id":"c1","name":"` + toolWork + `","arguments":` + args + `}]},` +
				`{"content":"` + name + ` done: {{result \"c1\"}}"}]}`)},
		})
		cmd := exec.CommandContext(t.Context(), bins.coordinator, "agents", "put", def)
		cmd.Env = approvalEnv(t, url, "operator")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("coordinator agents put %s: %v\n%s", name, err, out)
		}
	}
	w := startProcEnv(t, "w1", approvalEnv(t, url, "worker"), bins.toolworker,
		"--tools", manifest, "--name", "w1", "--concurrency", "1")
	w.waitLog(30*time.Second, "worker started")
	waitForApprovalCatalog(t, url, w, toolWork)
	serve := startProcEnv(t, "c1", approvalEnv(t, url, "coordinator"), bins.coordinator,
		"serve", "--nats-url", url, "--name", "c1", "--log-level", "info")
	serve.waitLog(30*time.Second, `"serving runs"`)

	nc, err := nats.Connect(url, nats.UserInfo("client", approvalPasswords["client"]), nats.CustomInboxPrefix("_INBOX_client"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := tfclient.New(nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var runs []tfclient.Run
	for i := range flood {
		s, err := cl.Submit(ctx, tfclient.Request{Prompt: "go", Agent: "flood", ID: fmt.Sprintf("flood-%d", i)})
		if err != nil {
			t.Fatalf("client submitting run %d: %v", i, err)
		}
		runs = append(runs, s)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if len(f.runsOf("a")) == 0 {
			return fmt.Errorf("the tool has not started a call of client's runs")
		}
		return nil
	})

	bobSubmit := exec.CommandContext(ctx, bins.coordinator, "submit", "--nats-url", url, "--agent", "quick", "--wait", "--wait-timeout", "150s", "hi")
	bobSubmit.Env = append(natscli.Env(t), "NATS_URL="+url, "NATS_USER=bob", "NATS_PASSWORD="+bobPassword)
	out, err := bobSubmit.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "quick done: ran b") {
		t.Fatalf("bob's run: %v\n%s", err, out)
	}

	for _, s := range runs {
		res, err := cl.Wait(ctx, s)
		if err != nil || res.TerminationReason != "natural" || !strings.Contains(res.Answer, "flood done: ran a") {
			t.Errorf("client's run %s: %+v, %v; want finished with its call's result", s.ID, res, err)
		}
	}
	before, b := 0, false
	for _, r := range f.runs() {
		if r.id == "b" {
			b = true
			break
		}
		before++
	}
	t.Logf("tool starts: %d of client's %d calls before bob's", before, flood)
	if !b || before >= flood {
		t.Errorf("bob's call started after all %d calls of client's backlog (%d before it), want while client's calls beyond its share of %d were still queued", flood, before, share)
	}
	if n := len(f.runsOf("a")); n != flood {
		t.Errorf("client's calls ran %d times, want %d", n, flood)
	}
}
