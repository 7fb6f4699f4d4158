package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

var passwords = map[string]string{
	"admin":         "tf-admin-1c2d3e",
	"coordinator":   "tf-coord-0a1b2c",
	"worker":        "tf-worker-3d4e5f",
	"worker_deploy": "tf-worker-deploy-4a5b6c",
	"leaf":          "tf-leaf-7b8c9d",
	"operator":      "tf-operator-6a7b8c",
	"viewer":        "tf-viewer-2e3f4a",
	"client":        "tf-client-9d0e1f",
}

// startFromConf starts a server from nats-server.conf, parsed by
// nats-server's own parser, on a random loopback port with its store in a
// temporary directory. It sets the passwords the file reads only while it
// parses (not with t.Setenv), so the tests that call it may run in
// parallel.
func startFromConf(t *testing.T) *server.Server {
	t.Helper()
	opts, err := processConfWithPasswords("nats-server.conf")
	if err != nil {
		t.Fatalf("ProcessConfigFile: %v", err)
	}
	if !opts.JetStream || opts.StoreDir == "" {
		t.Fatalf("JetStream=%v StoreDir=%q, want JetStream with a store dir", opts.JetStream, opts.StoreDir)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// confEnv serialises processConfWithPasswords: the environment is the
// process's, and parallel tests parse at the same time.
var confEnv sync.Mutex

// processConfWithPasswords parses the server config at path with each
// user's password of passwords in the environment variable it reads, and
// restores the environment before it returns.
func processConfWithPasswords(path string) (*server.Options, error) {
	confEnv.Lock()
	defer confEnv.Unlock()
	for user, pw := range passwords {
		v := passwordVar(user)
		old, had := os.LookupEnv(v)
		os.Setenv(v, pw)
		if had {
			defer os.Setenv(v, old)
		} else {
			defer os.Unsetenv(v)
		}
	}
	return server.ProcessConfigFile(path)
}

type client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func connectAs(t *testing.T, s *server.Server, user string) client {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, passwords[user]), nats.Name(user),
		nats.CustomInboxPrefix(inboxOf(user)),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // errors are read with LastError
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return client{nc, js}
}

// passwordVar is the environment variable nats-server.conf reads user's
// password from.
func passwordVar(user string) string { return "TOOLFLEET_" + strings.ToUpper(user) + "_PASSWORD" }

// inboxOf is the inbox prefix deploy/nats-server.conf grants user.
func inboxOf(user string) string { return "_INBOX_" + user }

// provision creates every stream and bucket of the fleet as the admin
// user, as "coordinator provision --tool-consumer deploy" does: deploy,
// the conf's tool with workers of its own, has record streams of its own.
func provision(t *testing.T, s *server.Server) {
	t.Helper()
	admin := connectAs(t, s, "admin")
	if _, err := natsbus.Provision(t.Context(), admin.js, protocol.Subjects{}, natsbus.StreamConfig{OwnRecordTools: []string{"deploy"}}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}
}

// refusedPub publishes on subj and reports whether the server answered with
// a permissions violation naming it.
func refusedPub(t *testing.T, c client, subj string) bool {
	t.Helper()
	if err := c.nc.Publish(subj, []byte(`{}`)); err != nil {
		t.Fatalf("publish %s: %v", subj, err)
	}
	return violated(t, c, "Publish", subj)
}

func refusedSub(t *testing.T, c client, subj string) bool {
	t.Helper()
	sub, err := c.nc.SubscribeSync(subj)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subj, err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	return violated(t, c, "Subscription", subj)
}

func violated(t *testing.T, c client, op, subj string) bool {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	err := c.nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("%s to %q", op, subj))
}

func TestConfRefusesUnknownClients(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	for name, opts := range map[string][]nats.Option{
		"anonymous":      nil,
		"wrong password": {nats.UserInfo("operator", "guess")},
		"unknown user":   {nats.UserInfo("root", "root")},
		"admin guessed":  {nats.UserInfo("admin", "admin")},
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := nats.Connect(s.ClientURL(), append(opts, nats.MaxReconnects(0))...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("err=%v, want an authorization error", err)
			}
		})
	}
}

func TestConfNeedsEveryPassword(t *testing.T) {
	t.Setenv("TOOLFLEET_COORDINATOR_PASSWORD", "tf-a")
	t.Setenv("TOOLFLEET_WORKER_PASSWORD", "tf-b")
	t.Setenv("TOOLFLEET_CLIENT_PASSWORD", "tf-d")
	// TOOLFLEET_OPERATOR_PASSWORD is unset: the server must refuse to start.
	t.Setenv("TOOLFLEET_OPERATOR_PASSWORD", "") // restored after the test
	os.Unsetenv("TOOLFLEET_OPERATOR_PASSWORD")
	if _, err := server.ProcessConfigFile("nats-server.conf"); err == nil {
		t.Fatal("config accepted without an operator password")
	}
}

func TestConfPermissions(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	subjects := protocol.Subjects{}

	// The admin creates the streams; neither the coordinator nor the worker may.
	provision(t, s)
	if err := natsbus.EnsureStreams(ctx, coord.js, subjects, natsbus.StreamConfig{ResultsMaxAge: time.Minute}); err == nil {
		t.Error("the coordinator changed a stream")
	}
	if err := natsbus.EnsureWorkerStreams(ctx, worker.js, subjects, natsbus.StreamConfig{ResultsMaxAge: time.Minute}); err == nil {
		t.Error("the worker changed a stream")
	}
	kv, err := worker.js.KeyValue(ctx, subjects.CatalogBucket())
	if err != nil {
		t.Fatalf("worker opening the catalog: %v", err)
	}
	if _, err := kv.Put(ctx, "echo", []byte(`{}`)); err != nil {
		t.Fatalf("worker writing the catalog: %v", err)
	}
	ckv, err := coord.js.KeyValue(ctx, subjects.CatalogBucket())
	if err != nil {
		t.Fatalf("coordinator opening the catalog: %v", err)
	}
	if _, err := ckv.Get(ctx, "echo"); err != nil {
		t.Fatalf("coordinator reading the catalog: %v", err)
	}

	decision := "fleet.approval.decision.run1.key1"

	t.Run("only the operator publishes decisions", func(t *testing.T) {
		// (the coordinator may not subscribe under fleet.approval.>: see
		// TestHostileDeliverSubjectIntoTheAuditLog)
		sub, err := op.nc.SubscribeSync(decision)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if !refusedPub(t, worker, decision) {
			t.Errorf("worker publish on %s not refused (last error %v)", decision, worker.nc.LastError())
		}
		if !refusedPub(t, coord, decision) {
			t.Errorf("coordinator publish on %s not refused (last error %v)", decision, coord.nc.LastError())
		}
		if err := op.nc.Publish(decision, []byte(`{"digest":"d","approved":true}`)); err != nil {
			t.Fatal(err)
		}
		if violated(t, op, "Publish", decision) {
			t.Fatal("operator publish on the decision subject refused")
		}
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil {
			t.Fatalf("operator's decision did not arrive: %v", err)
		}
		if string(m.Data) != `{"digest":"d","approved":true}` {
			t.Errorf("got %q", m.Data)
		}
		if _, err := sub.NextMsgWithContext(quick(t)); err == nil {
			t.Error("a refused decision was delivered")
		}
		// JetStream publishing is publishing: refused the same way.
		if _, err := worker.js.Publish(quick(t), decision, []byte(`{}`)); err == nil {
			t.Error("worker JetStream publish of a decision succeeded")
		}
	})

	t.Run("worker", func(t *testing.T) {
		for _, subj := range []string{
			"fleet.approval.request.run1.key1",
			"fleet.approval.outcome.run1.key1",
			"fleet.call.echo",
			"fleet.cancel.run1.key1",
			"$JS.API.STREAM.CREATE.FLEET_APPROVALS",
			"$JS.API.STREAM.UPDATE.FLEET_APPROVALS",
			"$JS.API.STREAM.PURGE.FLEET_APPROVALS",
			"$JS.API.STREAM.DELETE.FLEET_CALLS",
			"$JS.API.CONSUMER.CREATE.FLEET_APPROVALS.x",
			"$JS.API.CONSUMER.CREATE.FLEET_APPROVALS.x.fleet.approval.>",
			"$JS.API.STREAM.CREATE.FLEET_CALLS",
			"$JS.API.STREAM.UPDATE.FLEET_CALLS",
			"$JS.API.STREAM.UPDATE.FLEET_RESULTS",
			"$JS.API.STREAM.UPDATE.KV_fleet_tools",
		} {
			if !refusedPub(t, worker, subj) {
				t.Errorf("worker publish on %s not refused", subj)
			}
		}
		for _, subj := range []string{"fleet.approval.>", "fleet.approval.request.>", "fleet.result.>", ">"} {
			if !refusedSub(t, worker, subj) {
				t.Errorf("worker subscribe on %s not refused", subj)
			}
		}
	})

	t.Run("worker does its job", func(t *testing.T) {
		cancels, err := worker.nc.SubscribeSync("fleet.cancel.>")
		if err != nil || violated(t, worker, "Subscription", "fleet.cancel.>") {
			t.Fatalf("worker cannot subscribe to cancels: %v", err)
		}
		if _, err := coord.js.Publish(ctx, "fleet.call.echo.interactive.local", []byte(`call`)); err != nil {
			t.Fatalf("coordinator publishing a call: %v", err)
		}
		cons, err := worker.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), jetstream.ConsumerConfig{
			Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			t.Fatalf("worker creating its consumer: %v", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatalf("worker pulling a call: %v", err)
		}
		if _, err := worker.js.Publish(ctx, "fleet.result.run1", []byte(`result`)); err != nil {
			t.Fatalf("worker publishing a result: %v", err)
		}
		if err := worker.nc.Publish("fleet.progress.run1", []byte(`p`)); err != nil || violated(t, worker, "Publish", "fleet.progress.run1") {
			t.Fatalf("worker publishing progress refused: %v", err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("worker acking: %v", err)
		}
		if err := coord.nc.Publish("fleet.cancel.run1.key1", []byte(`c`)); err != nil {
			t.Fatal(err)
		}
		if _, err := cancels.NextMsg(2 * time.Second); err != nil {
			t.Fatalf("worker did not get the cancel: %v", err)
		}
	})

	t.Run("coordinator withdraws a call no worker claimed", func(t *testing.T) {
		ack, err := coord.js.Publish(ctx, "fleet.call.withdrawn.interactive.local", []byte(`call`))
		if err != nil {
			t.Fatalf("coordinator publishing a call: %v", err)
		}
		st, err := coord.js.Stream(ctx, subjects.CallsStream())
		if err != nil {
			t.Fatalf("coordinator looking up the calls stream: %v", err)
		}
		if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
			t.Fatalf("coordinator withdrawing its call: %v", err)
		}
		if _, err := st.GetMsg(ctx, ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("the withdrawn call: %v, want it gone", err)
		}
	})

	t.Run("coordinator cannot erase the audit log", func(t *testing.T) {
		for _, subj := range []string{
			"$JS.API.STREAM.PURGE.FLEET_APPROVALS",
			"$JS.API.STREAM.DELETE.FLEET_APPROVALS",
			"$JS.API.STREAM.MSG.DELETE.FLEET_APPROVALS",
		} {
			if !refusedPub(t, coord, subj) {
				t.Errorf("coordinator publish on %s not refused", subj)
			}
		}
	})

	t.Run("operator", func(t *testing.T) {
		for _, subj := range []string{
			"fleet.approval.request.run1.key1",
			"fleet.approval.outcome.run1.key1",
			"fleet.call.echo",
			"fleet.result.run1",
			"$KV.fleet_tools.echo",
			"$JS.API.STREAM.PURGE.FLEET_APPROVALS",
			"$JS.API.STREAM.UPDATE.FLEET_APPROVALS",
			"$JS.API.STREAM.INFO.FLEET_CALLS",
		} {
			if !refusedPub(t, op, subj) {
				t.Errorf("operator publish on %s not refused", subj)
			}
		}
		if !refusedSub(t, op, "fleet.call.>") {
			t.Error("operator subscribe on fleet.call.> not refused")
		}
		st, err := op.js.Stream(ctx, subjects.ApprovalsStream())
		if err != nil {
			t.Fatalf("operator reading the approvals stream: %v", err)
		}
		if _, err := st.GetLastMsgForSubject(ctx, decision); err != nil {
			t.Fatalf("operator reading a decision from the stream: %v", err)
		}
	})

	// The coordinator reads every result through one consumer of
	// fleet.result.> and a resumed run's past results through a catch-up
	// consumer of its own subject.
	t.Run("coordinator reads results", func(t *testing.T) {
		run := protocol.NewRunID()
		d := dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{})
		defer d.Close()
		in, err := d.Open(ctx, run)
		if err != nil {
			t.Fatalf("coordinator opening a run's inbox: %v", err)
		}
		defer in.Close()
		subj, _ := subjects.Result(run, "echo")
		r := protocol.Result{V: protocol.Version, RunID: run, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK}
		in.(loop.ExpectInbox).Expect(r.CallKey, "echo") // a call of the run (only those are answered)
		data, _ := protocol.Encode(&r)
		if _, err := worker.js.Publish(ctx, subj, data); err != nil {
			t.Fatalf("worker storing a result: %v", err)
		}
		got := func(in interface{ Events() <-chan loop.Event }) {
			t.Helper()
			select {
			case ev := <-in.Events():
				if ev.Result == nil || ev.Result.CallKey != r.CallKey {
					t.Fatalf("got %+v, want the stored result", ev)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stored result never reached the inbox")
			}
		}
		got(in)
		resumed := dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{})
		defer resumed.Close()
		again, err := resumed.Open(ctx, run)
		if err != nil {
			t.Fatalf("coordinator reopening the run: %v", err)
		}
		defer again.Close()
		again.(loop.ExpectInbox).Expect(r.CallKey, "echo") // as a resumed round does
		again.(loop.CatchUpInbox).CaughtUp()
		got(again)
	})
}

// TestConfOperatorWorkflow runs an approval end to end under the shipped
// permissions: the coordinator user runs the gate, the operator user lists
// and answers with the approvals commands and with the nats CLI.
func TestConfOperatorWorkflow(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	coord := connectAs(t, s, "coordinator")
	subjects := protocol.Subjects{}
	provision(t, s)
	gate := approval.NewGate(coord.nc, coord.js, subjects, approval.GateConfig{})

	type res struct {
		approved bool
		reason   string
		err      error
	}
	ask := func(key, args string) <-chan res {
		ch := make(chan res, 1)
		go func() {
			d, err := gate.Approve(ctx, protocol.ApprovalRequest{
				RunID: "run1", CallKey: protocol.CallKey(key), Round: 1, Tool: "deploy",
				Arguments: []byte(args), Deadline: time.Now().Add(20 * time.Second),
			})
			ch <- res{d.Approved, d.Reason, err}
		}()
		return ch
	}
	first := ask("key1", `{"env":"prod"}`)
	second := ask("key2", `{"env":"staging"}`)

	// Both show up in "coordinator approvals list", run as the operator user.
	var list string
	testsync.WaitFor(t, 30*time.Second, func() error {
		code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "approvals", "list")
		if code != 0 {
			t.Fatalf("approvals list as operator: exit %d: %s", code, errb)
		}
		if list = out; !strings.Contains(list, "2 pending") {
			return fmt.Errorf("approvals list:\n%s", list)
		}
		return nil
	})
	if !strings.Contains(list, `arguments: {"env":"prod"}`) {
		t.Fatalf("approvals list:\n%s", list)
	}

	// Approve the first with the command.
	code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "approvals", "approve", "run1", "key1", "--approver", "alice")
	if code != 0 {
		t.Fatalf("approvals approve as operator: exit %d: %s\n%s", code, errb, out)
	}
	if r := <-first; r.err != nil || !r.approved {
		t.Fatalf("first call: %+v, want approved", r)
	}

	// Deny the second with the nats CLI, exactly as the list printed it.
	var denyLine string
	_, again, _ := coordinatorAs(t, s.ClientURL(), "operator", "approvals", "list")
	for _, line := range strings.Split(out+again, "\n") {
		if strings.HasPrefix(line, "deny:") && strings.Contains(line, "run1.key2") {
			denyLine = strings.TrimSpace(strings.TrimPrefix(line, "deny:"))
		}
	}
	if denyLine == "" {
		t.Fatal("no deny command printed for key2")
	}
	denyLine = strings.Replace(denyLine, "REASON", "staging is frozen", 1)
	nats := natscli.Path(t)
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.Replace(denyLine, "nats pub", `"$NATS_BIN" pub`, 1))
	cmd.Env = append(natscli.Env(t), "NATS_BIN="+nats, "NATS_URL="+s.ClientURL(), "NATS_USER=operator", "NATS_PASSWORD="+passwords["operator"])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", denyLine, err, b)
	}
	if r := <-second; r.err != nil || r.approved || r.reason != "staging is frozen" {
		t.Fatalf("second call: %+v, want denied with the reason", r)
	}

	// The operator reads the audit log with the nats CLI.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stream", "info", "FLEET_APPROVALS"}, "Allows Purge: false"},
		{[]string{"stream", "get", "FLEET_APPROVALS", "-S", "fleet.approval.request.run1.key2"}, `"arguments":{"env":"staging"}`},
		{[]string{"stream", "get", "FLEET_APPROVALS", "-S", "fleet.approval.outcome.run1.key1"}, `"outcome":"approved"`},
		{[]string{"sub", "fleet.approval.decision.run1.key2", "--stream", "FLEET_APPROVALS", "--all", "--count", "1", "--raw"}, `"reason":"staging is frozen"`},
	} {
		c := exec.CommandContext(ctx, nats, append([]string{"--inbox-prefix", inboxOf("operator")}, tc.args...)...)
		c.Env = cmd.Env
		c.Stdin = strings.NewReader("")
		b, err := runWithin(c, 20*time.Second)
		if err != nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("nats %s: %v; want output with %q:\n%s", strings.Join(tc.args, " "), err, tc.want, b)
		}
	}
}

// runWithin runs c and kills it if it has not finished within d.
func runWithin(c *exec.Cmd, d time.Duration) ([]byte, error) {
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(d, func() { _ = c.Process.Kill() })
	defer timer.Stop()
	err := c.Wait()
	return out.Bytes(), err
}

func quick(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}
