package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestStreamDriftStopsAServingFleet runs a toolworker and a serving
// coordinator against deploy/nats-server.conf; an admin rewrites a stream
// under them (republish, as a stolen STREAM.UPDATE grant would). Both
// stop serving — an error line naming the stream and field, the drift
// metric, a failing /readyz, submissions refused — until "coordinator
// provision" restores the stream, after which a run is served. No NATS
// password appears in any log, metric or stored message.
func TestStreamDriftStopsAServingFleet(t *testing.T) {
	t.Parallel()
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	wAddr, cAddr := freeAddr(t), freeAddr(t)
	worker := startProcEnv(t, "toolworker", approvalEnv(t, url, "worker"), bins.toolworker,
		"--builtin", "calculator,echo", "--name", "w1", "--metrics-addr", wAddr, "--stream-check-interval", "200ms")
	coord := startProcEnv(t, "coordinator", approvalEnv(t, url, "coordinator"), bins.coordinator,
		"serve", "--nats-url", url, "--name", "c1", "--metrics-addr", cAddr, "--stream-check-interval", "200ms")
	for _, addr := range []string{wAddr, cAddr} {
		natstest.WaitFor(t, 60*time.Second, func() error {
			_, err := httpGet("http://" + addr + "/readyz")
			return err
		})
	}

	// The admin rewrites FLEET_RESULTS under the running fleet.
	_, ajs := approvalConn(t, url, "admin")
	want := natsbus.StreamsOf(natsbus.FleetStreams(protocol.Subjects{}, natsbus.StreamConfig{}), natsbus.RoleWorker)
	var results jetstream.StreamConfig
	for _, fs := range want {
		if fs.Config.Name == "FLEET_RESULTS" {
			results = fs.Config
		}
	}
	bad := results
	bad.RePublish = &jetstream.RePublish{Source: "fleet.result.>", Destination: "stolen.>"}
	if _, err := ajs.UpdateStream(t.Context(), bad); err != nil {
		t.Fatalf("admin rewriting FLEET_RESULTS: %v", err)
	}
	for name, addr := range map[string]string{"toolworker": wAddr, "coordinator": cAddr} {
		natstest.WaitFor(t, 30*time.Second, func() error {
			body, err := httpGet("http://" + addr + "/readyz")
			if err == nil || !strings.Contains(body, "FLEET_RESULTS") {
				return fmt.Errorf("%s /readyz: %v %q, want not ready naming FLEET_RESULTS", name, err, body)
			}
			metrics, _ := httpGet("http://" + addr + "/metrics")
			if !strings.Contains(metrics, `toolfleet_stream_config_drift{field="republish",stream="FLEET_RESULTS"} 1`) {
				return fmt.Errorf("%s: no drift metric yet", name)
			}
			return nil
		})
	}
	for _, p := range []*proc{worker, coord} {
		p.waitLog(30*time.Second, `"level":"error"`, `"stream":"FLEET_RESULTS"`, `"field":"republish"`)
	}
	// A submission is still accepted (the server stores it); no
	// coordinator takes it while a stream differs.
	code, out := runSubmit(t, url, "--timeout", "10s", "--id", "drifted1", "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")
	if code != 0 {
		t.Fatalf("submission while drifted: exit %d\n%s", code, out)
	}

	// Provisioning restores it; the fleet serves again.
	provisionAs(t, url, approvalEnv(t, url, "admin"))
	for name, addr := range map[string]string{"toolworker": wAddr, "coordinator": cAddr} {
		natstest.WaitFor(t, 30*time.Second, func() error {
			if body, err := httpGet("http://" + addr + "/readyz"); err != nil {
				return fmt.Errorf("%s /readyz: %v %q", name, err, body)
			}
			metrics, _ := httpGet("http://" + addr + "/metrics")
			if !strings.Contains(metrics, `toolfleet_stream_config_drift{field="republish",stream="FLEET_RESULTS"} 0`) {
				return fmt.Errorf("%s: drift metric not back to 0", name)
			}
			return nil
		})
	}
	// Submitting it again waits for the same run.
	code, out = runSubmit(t, url, "--wait", "--wait-timeout", "60s", "--id", "drifted1", "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")
	if code != 0 || !strings.Contains(out, "1150") {
		t.Fatalf("submission after provision: exit %d\n%s", code, out)
	}

	// The canary: no password in a log, a metrics page or a stored message.
	var seen strings.Builder
	seen.WriteString(worker.log() + coord.log() + out)
	for _, addr := range []string{wAddr, cAddr} {
		m, _ := httpGet("http://" + addr + "/metrics")
		seen.WriteString(m)
	}
	for _, fs := range natsbus.FleetStreams(protocol.Subjects{}, natsbus.StreamConfig{}) {
		seen.WriteString(streamContents(t, ajs, fs.Config.Name))
	}
	for user, pw := range approvalPasswords {
		if strings.Contains(seen.String(), pw) {
			t.Errorf("the %s password appears in a log, a metric or a stored message", user)
		}
	}
}

// runSubmit runs "coordinator submit" as the client user and returns its
// exit status and output.
func runSubmit(t *testing.T, url string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, append([]string{"submit", "--nats-url", url}, args...)...)
	cmd.Env = approvalEnv(t, url, "client")
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// streamContents returns every message stored in stream, subjects,
// headers and data, as text, read by sequence.
func streamContents(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("reading %s: %v", stream, err)
	}
	state := st.CachedInfo().State
	var b strings.Builder
	for seq := state.FirstSeq; seq != 0 && seq <= state.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (a work queue's acknowledged message)
		}
		fmt.Fprintf(&b, "%s %v %s\n", m.Subject, m.Header, m.Data)
	}
	return b.String()
}

// httpGet returns the body of url, and an error unless it answered 200.
func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), nil
}
