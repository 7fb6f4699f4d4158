package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/httpapi"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestAPIApprovalOnTheEmbeddedFleet: on the embedded fleet "coordinator
// console" starts without --nats-url, a run that asks for the
// calculator's approval waits for it; the operator approves it through
// the HTTP API, and the in-process worker runs the call: it ends ok and
// the run answers.
func TestAPIApprovalOnTheEmbeddedFleet(t *testing.T) {
	t.Parallel()
	passwords := map[string]string{"client": "tf-e2e-approval-client", "operator": "tf-e2e-approval-operator"}
	console := startProcEnv(t, "console", []string{"TMPDIR=" + t.TempDir(),
		"TOOLFLEET_CLIENT_PASSWORD=" + passwords["client"], "TOOLFLEET_OPERATOR_PASSWORD=" + passwords["operator"]},
		bins.coordinator, "console", "--addr", "127.0.0.1:0", "--store-dir", t.TempDir())
	console.waitLog(60*time.Second, `"serving the HTTP API"`, `"serving runs"`)
	api := "http://" + console.logLines(func(m map[string]any) bool { return m["message"] == "serving the HTTP API" })[0]["addr"].(string)
	call := func(method, path, user, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, api+path, strings.NewReader(body))
		req.SetBasicAuth(user, passwords[user])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	st, body := call("POST", "/v1/runs", "client", `{"prompt": "What is 6 * 7?", "require_approval": ["calculator"]}`)
	var sub struct {
		RunID string `json:"run_id"`
	}
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit: %d %s", st, body)
	}
	var pending httpapi.Approval
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, body := call("GET", "/v1/approvals", "operator", "")
		var list struct {
			Approvals []httpapi.Approval `json:"approvals"`
		}
		if st != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
			return fmt.Errorf("approvals: %d %s", st, body)
		}
		for _, a := range list.Approvals {
			if string(a.RunID) == sub.RunID {
				pending = a
				return nil
			}
		}
		return fmt.Errorf("no approval request of the run yet: %s", body)
	})
	if pending.Tool != "calculator" {
		t.Fatalf("the approval request is for %q, want calculator", pending.Tool)
	}
	st, body = call("POST", fmt.Sprintf("/v1/approvals/%s/%s", pending.RunID, pending.CallKey), "operator",
		`{"decision": "approve", "reason": "checked the expression"}`)
	if st != http.StatusOK && st != http.StatusAccepted {
		t.Fatalf("approve: %d %s", st, body)
	}
	var run httpapi.Run
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, body := call("GET", "/v1/runs/"+sub.RunID, "operator", "")
		run = httpapi.Run{}
		if st != http.StatusOK || json.Unmarshal([]byte(body), &run) != nil || run.Result == nil {
			return fmt.Errorf("the run: %d %s", st, body)
		}
		return nil
	})
	var calc []httpapi.RunCall
	for _, c := range run.Calls {
		if c.Tool == "calculator" {
			calc = append(calc, c)
		}
	}
	if len(calc) != 1 || calc[0].Outcome != protocol.OutcomeOK || calc[0].Worker == "" {
		t.Fatalf("the approved calculator call: %+v, want one, ok, run by a worker\nconsole log:\n%s", calc, console.log())
	}
	if st, body := call("GET", "/v1/runs/"+sub.RunID, "client", ""); st != http.StatusOK || !strings.Contains(body, "6 * 7 = 42") {
		t.Fatalf("the run's answer: %d %s", st, body)
	}
}

// TestServeApprovalOnTheEmbeddedFleet: the README's first command,
// "coordinator serve" on its embedded server, with the calculator gated;
// the client submits (with the credentials file serve writes), the
// operator approves with "coordinator approvals approve", and the
// in-process worker runs the call: it ends ok and the run answers.
func TestServeApprovalOnTheEmbeddedFleet(t *testing.T) {
	t.Parallel()
	const operatorPassword = "tf-e2e-serve-approval-operator"
	serve := startProcEnv(t, "serve", []string{"TMPDIR=" + t.TempDir(), "TOOLFLEET_OPERATOR_PASSWORD=" + operatorPassword},
		bins.coordinator, "serve", "--name", "c1", "--store-dir", t.TempDir(), "--require-approval", "calculator")
	serve.waitLog(60*time.Second, `"clients submit runs through the embedded server"`, `"serving runs"`)
	line := serve.logLines(func(m map[string]any) bool { return m["message"] == "clients submit runs through the embedded server" })[0]
	url, creds := line["nats_url"].(string), line["credentials_file"].(string)
	submit := startProcEnv(t, "submit", envList(readEnvFile(t, creds)),
		bins.coordinator, "submit", "--wait", "--output", "json", "What is 6 * 7?")
	req := operatorPendingApproval(t, url, operatorPassword, "calculator")
	approve := startProcEnv(t, "approve", []string{"NATS_URL=" + url, "NATS_USER=operator", "NATS_PASSWORD=" + operatorPassword},
		bins.coordinator, "approvals", "approve", string(req.RunID), string(req.CallKey), "--reason", "checked the expression")
	if code := approve.wait(60 * time.Second); code != 0 {
		t.Fatalf("approvals approve exited %d:\n%s", code, approve.log())
	}
	if code := submit.wait(60 * time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, submit.log())
	}
	var res protocol.RunResult
	if err := json.Unmarshal([]byte(submit.stdout.String()), &res); err != nil {
		t.Fatalf("the run's result: %v\n%s", err, submit.stdout.String())
	}
	lr, err := client.LoopResult(&res)
	if err != nil {
		t.Fatal(err)
	}
	calls := lr.CallResults()
	if len(calls) != 1 || calls[0].Tool != "calculator" || calls[0].Outcome != protocol.OutcomeOK || calls[0].Worker == "" {
		t.Fatalf("the approved calculator call: %+v, want one, ok, run by a worker\nserve log:\n%s", calls, serve.log())
	}
	if !strings.Contains(res.Answer, "6 * 7 = 42") {
		t.Fatalf("the run's answer: %q", res.Answer)
	}
}
