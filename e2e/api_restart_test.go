package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestAPIAcrossRestarts: "coordinator console" keeps serving across a
// restart of its NATS server (from deploy/nats-server.conf, same port and
// store) and of the serving coordinator (killed, another started): the
// operator's session from before — its cookie, its NATS connection — lists
// runs after both, and a run the client submits through the API then is
// run by the new coordinator and read back.
func TestAPIAcrossRestarts(t *testing.T) {
	t.Parallel()
	opts, err := deployServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	start := func() *server.Server {
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s
	}
	srv := start()
	url := srv.ClientURL()
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	provisionAs(t, url, approvalEnv(t, url, "admin"))

	serve := startProcEnv(t, "serve1", approvalEnv(t, url, "coordinator"), bins.coordinator, "serve", "--name", "c1")
	startProcEnv(t, "worker", approvalEnv(t, url, "worker"), bins.toolworker, "--builtin", "calculator")
	console := startProcEnv(t, "console", []string{"NATS_URL=" + url}, bins.coordinator, "console", "--addr", "127.0.0.1:0")
	serve.waitLog(30*time.Second, `"serving runs"`)
	console.waitLog(30*time.Second, `"serving the HTTP API"`)
	api := "http://" + console.logLines(func(m map[string]any) bool { return m["message"] == "serving the HTTP API" })[0]["addr"].(string)

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	send := func(c *http.Client, method, path, user, csrf string, body any) (int, []byte) {
		var rd io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			rd = bytes.NewReader(data)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, api+path, rd)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", api)
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		if user != "" {
			req.SetBasicAuth(user, approvalPasswords[user])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	st, body := send(browser, "POST", "/v1/session", "", "", map[string]string{"user": "operator", "password": approvalPasswords["operator"]})
	if st != http.StatusCreated {
		t.Fatalf("login: %d %s", st, body)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	start()
	serve.kill()
	serve2 := startProcEnv(t, "serve2", approvalEnv(t, url, "coordinator"), bins.coordinator, "serve", "--name", "c2")
	serve2.waitLog(30*time.Second, `"serving runs"`)

	var sub struct {
		RunID string `json:"run_id"`
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, body := send(http.DefaultClient, "POST", "/v1/runs", "client", "", map[string]string{"prompt": "What is 6 * 7?"})
		if st != http.StatusCreated && st != http.StatusOK {
			return fmt.Errorf("submit after the restarts: %d %s", st, body)
		}
		return json.Unmarshal(body, &sub)
	})
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, body := send(http.DefaultClient, "GET", "/v1/runs/"+sub.RunID, "client", "", nil)
		if st != http.StatusOK || !strings.Contains(string(body), `"coordinator": "c2"`) || !strings.Contains(string(body), "6 * 7 = 42") {
			return fmt.Errorf("the run's result: %d %s", st, body)
		}
		return nil
	})
	if st, body := send(browser, "GET", "/v1/runs", "", "", nil); st != http.StatusOK || !strings.Contains(string(body), sub.RunID) {
		t.Fatalf("the operator's session from before the restarts lists runs: %d %s", st, body)
	}
}
