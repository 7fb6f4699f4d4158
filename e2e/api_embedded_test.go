package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestAPIOnTheEmbeddedFleet: "coordinator console" without --nats-url
// starts the embedded fleet "coordinator serve" starts and serves the API
// on it: the client (its password from TOOLFLEET_CLIENT_PASSWORD) submits
// the demo run and reads its answer, the operator (from
// TOOLFLEET_OPERATOR_PASSWORD) sees the in-process worker's tools.
func TestAPIOnTheEmbeddedFleet(t *testing.T) {
	t.Parallel()
	passwords := map[string]string{"client": "tf-e2e-console-client", "operator": "tf-e2e-console-operator"}
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
	st, body := call("POST", "/v1/runs", "client", `{"prompt": "What is 6 * 7?"}`)
	var sub struct {
		RunID string `json:"run_id"`
	}
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit: %d %s", st, body)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		if st, body := call("GET", "/v1/runs/"+sub.RunID, "client", ""); st != http.StatusOK || !strings.Contains(body, "6 * 7 = 42") {
			return fmt.Errorf("the run: %d %s", st, body)
		}
		return nil
	})
	if st, body := call("GET", "/v1/tools", "operator", ""); st != http.StatusOK || !strings.Contains(body, `"calculator"`) {
		t.Fatalf("tools: %d %s", st, body)
	}
	for _, p := range passwords {
		if strings.Contains(console.log(), p) {
			t.Fatal("a password is in the console's log")
		}
	}
}
