package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// composeVar is a compose interpolation: ${NAME}, ${NAME:-default} or
// ${NAME:?message}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::([-?])([^}]*))?\}`)

// interpolate resolves compose's ${...} against vars, as docker compose
// does with deploy/.env.
func interpolate(t testing.TB, s string, vars map[string]string) string {
	t.Helper()
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		p := composeVar.FindStringSubmatch(m)
		if v, ok := vars[p[1]]; ok && v != "" {
			return v
		}
		switch p[2] {
		case "-":
			return p[3]
		case "?":
			t.Fatalf("compose would refuse to start: %s is unset (%s)", p[1], p[3])
		}
		return ""
	})
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is one started container's command.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *testsync.Buffer
	done chan struct{}
}

func start(t *testing.T, name, bin string, args, env []string) *process {
	t.Helper()
	p := &process{name: name, out: &testsync.Buffer{Limit: 1 << 20}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }() //nolint:errcheck
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill() //nolint:errcheck
			<-p.done
			t.Errorf("%s did not stop within 10s of SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, tail(p.out.String(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// eventually runs f until it succeeds or d passes, and returns its last error.
func eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestComposeServesARun does what docs/deploy.md tells a new user to do
// with docker compose, without Docker: a nats-server from nats-server.conf
// (with the compose file's monitoring flag), the compose file's coordinator
// and toolworkers started from the images' binaries with the compose
// file's own command and environment (only the addresses differ: NATS_URL
// and each --metrics-addr point at this machine), each made healthy by the
// compose healthcheck, then, as the compose "nats-cli" service does, the
// nats CLI as the client user submits a run and reads its result from the
// runs bucket, and as the operator user lists the workers with nats micro ls.
func TestComposeServesARun(t *testing.T) {
	bins := imageBinaries(t)
	natsBin := natscli.Path(t)
	compose := composeFile(t)
	svcs := get(compose, "services").(map[string]any)

	// deploy/.env, as gen-env.sh writes it.
	out, err := exec.Command("sh", "gen-env.sh").Output()
	if err != nil {
		t.Fatalf("gen-env.sh: %v", err)
	}
	dotenv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		dotenv[k] = v
	}

	// nats: the compose service's configuration and environment.
	for k, v := range stringMap(get(svcs["nats"], "environment")) {
		t.Setenv(k, interpolate(t, v, dotenv))
	}
	opts, err := server.ProcessConfigFile("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.HTTPHost, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT // compose: -m 8222
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	// The nats service's healthcheck asks the monitoring port's /healthz.
	monitor := ns.MonitorAddr()
	if monitor == nil {
		t.Fatal("monitoring is off")
	}
	if err := eventually(10*time.Second, func() error { return httpOK("http://" + monitor.String() + "/healthz") }); err != nil {
		t.Fatalf("nats healthcheck: %v", err)
	}
	natsURL := ns.ClientURL()

	// Our services, in dependency order, each until its healthcheck passes.
	type started struct {
		name, metrics string
		p             *process
	}
	var running []started
	taken := map[string]bool{} // the metrics addresses handed out
	var submit invocation
	invocations := composeInvocations(t)
	// One-shot jobs first, to completion: provision creates the streams.
	for _, in := range invocations {
		if !in.oneShot {
			continue
		}
		env := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range in.env {
			if k == "NATS_URL" {
				v = natsURL
			}
			env = append(env, k+"="+interpolate(t, v, dotenv))
		}
		c := exec.Command(filepath.Join(bins, in.binary), in.args...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", in.where, err, out)
		}
	}
	for _, in := range invocations {
		if in.oneShot {
			continue
		}
		svc := strings.TrimPrefix(in.where, "docker-compose.yml service ")
		if len(in.profiles) > 0 { // not started by "up"
			if svc == "submit" {
				submit = in
			}
			continue
		}
		replicas := 1
		if r, ok := get(svcs[svc], "deploy", "replicas").(int); ok {
			replicas = r
		}
		for i := 1; i <= replicas; i++ {
			name := fmt.Sprintf("%s-%d", svc, i)
			env := []string{"PATH=" + os.Getenv("PATH")}
			for k, v := range in.env {
				if k == "NATS_URL" {
					v = natsURL
				}
				env = append(env, k+"="+interpolate(t, v, dotenv))
			}
			// A port freed by freeAddr may be handed out again before the
			// process given it binds it: each process gets its own.
			metrics := freeAddr(t)
			for taken[metrics] {
				metrics = freeAddr(t)
			}
			taken[metrics] = true
			args := append([]string(nil), in.args...)
			for j := 1; j < len(args); j++ {
				if strings.TrimLeft(args[j-1], "-") == "metrics-addr" {
					args[j] = metrics
				}
			}
			p := start(t, name, filepath.Join(bins, in.binary), args, env)
			running = append(running, started{name, metrics, p})
		}
	}
	for _, r := range running {
		svc := r.name[:strings.LastIndex(r.name, "-")]
		test := stringList(t, svc+".healthcheck.test", get(svcs[svc], "healthcheck", "test"))
		_, port, _ := net.SplitHostPort(r.metrics)
		argv := make([]string, 0, len(test))
		for _, a := range test[1:] { // test[0] is "CMD"
			a = strings.Replace(a, "127.0.0.1:9090", "127.0.0.1:"+port, 1)
			a = strings.Replace(a, "/usr/local/bin/", bins+"/", 1)
			argv = append(argv, a)
		}
		if err := eventually(20*time.Second, func() error {
			select {
			case <-r.p.done:
				t.Fatalf("%s exited: %v", r.name, r.p.cmd.ProcessState)
			default:
			}
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s healthcheck %v: %v", r.name, argv, err)
		}
	}

	cli := func(user string, args ...string) (string, error) {
		env := natscli.Env(t)
		for k, v := range stringMap(get(svcs["nats-cli"], "environment")) {
			if k == "NATS_URL" {
				v = natsURL
			}
			if k == "NATS_USER" {
				v = user
			}
			if k == "NATS_PASSWORD" && user != "client" {
				v = "${TOOLFLEET_" + strings.ToUpper(user) + "_PASSWORD}"
			}
			env = append(env, k+"="+interpolate(t, v, dotenv))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		// As the compose entrypoint does: replies on the user's own inbox.
		c := exec.CommandContext(ctx, natsBin, append([]string{"--inbox-prefix", "_INBOX_" + user}, args...)...)
		c.Env = env
		c.Stdin = strings.NewReader("")
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		err := c.Run()
		return out.String(), err
	}

	t.Run("nats micro ls as the operator", func(t *testing.T) {
		want := get(svcs["toolworker"], "deploy", "replicas").(int)
		var last string
		if err := eventually(10*time.Second, func() error {
			out, err := cli("operator", "micro", "ls", "toolworker", "--json")
			last = out
			if err != nil {
				return err
			}
			if n := strings.Count(out, `"name": "toolworker"`) + strings.Count(out, `"name":"toolworker"`); n != want {
				return fmt.Errorf("%d toolworker instances listed, want %d", n, want)
			}
			return nil
		}); err != nil {
			t.Errorf("nats micro ls toolworker: %v\n%s", err, last)
		}
	})

	// The docs' submission, as the client user.
	reply, err := cli("client", "req", "--raw", "fleet.run.submit.client.default.compose1", `{"prompt": "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?"}`,
		"-H", "Nats-Msg-Id:"+protocol.SubmissionMsgID("client", "compose1"), "-H", protocol.HeaderAgent+":"+protocol.DefaultAgent)
	if err != nil || !strings.Contains(reply, `"stream":"FLEET_RUNS"`) {
		t.Fatalf("nats req fleet.run.submit.client.default.compose1: %v\n%s", err, reply)
	}
	resp := protocol.RunResponse{ResultBucket: "fleet_runs", ResultKey: protocol.RunKey("client", protocol.SubmissionRunID("client", "compose1"))}
	var stored string
	if err := eventually(30*time.Second, func() error {
		// The direct get the client's account imports (the docs' way).
		out, err := cli("client", "req", "--raw", "$JS.API.DIRECT.GET.KV_"+resp.ResultBucket+".$KV."+resp.ResultBucket+"."+resp.ResultKey, "")
		stored = out
		if err == nil && !strings.Contains(out, `"run_id"`) {
			err = fmt.Errorf("no result stored yet")
		}
		return err
	}); err != nil {
		t.Fatalf("nats req a direct get of %s %s: %v\n%s", resp.ResultBucket, resp.ResultKey, err, stored)
	}
	res, err := protocol.DecodeRunResult(bytes.TrimSpace([]byte(stored)), 0)
	if err != nil {
		t.Fatalf("stored result: %v\n%s", err, stored)
	}
	if res.TerminationReason != "natural" || res.Error != nil || !strings.Contains(res.Answer, "1150") {
		t.Errorf("run %s: termination %q, error %+v, answer %q; want the demo's natural answer with 1150", res.RunID, res.TerminationReason, res.Error, res.Answer)
	}

	// The docs' other way: docker compose run --rm submit --wait "...".
	t.Run("coordinator submit --wait", func(t *testing.T) {
		if submit.binary == "" {
			t.Fatal("no submit service")
		}
		env := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range submit.env {
			if k == "NATS_URL" {
				v = natsURL
			}
			env = append(env, k+"="+interpolate(t, v, dotenv))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, filepath.Join(bins, submit.binary), append(submit.args, "--wait", "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")...)
		c.Env = env
		out, err := c.Output()
		if err != nil || !strings.Contains(string(out), "1150") {
			t.Errorf("coordinator submit --wait: %v\n%s", err, out)
		}
	})

	// Two runs of the demo (the nats req and the submit), three calculator
	// calls each: the coordinator counted them, and the workers together
	// ran the six calls.
	t.Run("metrics", func(t *testing.T) {
		if err := eventually(5*time.Second, func() error {
			var workerCalls float64
			for _, r := range running {
				fams := metricstest.Scrape(t, "http://"+r.metrics+"/metrics")
				if strings.HasPrefix(r.name, "coordinator") {
					if err := fams.Want("toolfleet_coordinator_runs_total", metricstest.L("reason", "natural"), 2); err != nil {
						return fmt.Errorf("%s: %w", r.name, err)
					}
					if err := fams.Want("toolfleet_coordinator_calls_total", metricstest.L("tool", "calculator", "outcome", "ok"), 6); err != nil {
						return fmt.Errorf("%s: %w", r.name, err)
					}
					continue
				}
				n, _ := fams.Value("toolfleet_worker_calls_total", metricstest.L("tool", "calculator", "outcome", "ok"))
				workerCalls += n
			}
			if workerCalls != 6 {
				return fmt.Errorf("the toolworkers counted %v calculator calls, want 6", workerCalls)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
}

func httpOK(url string) error {
	_, err := httpGet(url)
	return err
}

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
