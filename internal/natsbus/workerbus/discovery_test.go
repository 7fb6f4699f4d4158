package workerbus_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fastDiscover gathers answers briefly, for tests.
var fastDiscover = discovery.DiscoverConfig{Wait: 2 * time.Second, Quiet: 200 * time.Millisecond}

// echoWithSchema is an echo tool whose schema differs from the built-in
// one, as a worker running another version of it would serve.
func echoWithSchema(schema string) harness.Tool {
	t := harnesstest.Static("echo", "hi")
	t.Parameters = json.RawMessage(schema)
	return t
}

// discoverN polls Discover until it lists n workers.
func discoverN(t *testing.T, f *bustest.Fleet, n int) []discovery.DiscoveredWorker {
	t.Helper()
	var got []discovery.DiscoveredWorker
	natstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		if got, err = discovery.Discover(bustest.Ctx(t), f.NC, f.Subjects, fastDiscover); err != nil {
			return err
		}
		if len(got) != n {
			return fmt.Errorf("discovered %d workers, want %d", len(got), n)
		}
		return nil
	})
	return got
}

func TestWorkersAreDiscoverable(t *testing.T) {
	f := bustest.NewFleet(t)
	builtins, err := harness.Builtins([]string{"calculator", "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h1 := harnesstest.New(t, harness.Config{}, builtins...)
	w1, _ := f.StartWorker(t, h1, workerbus.WorkerConfig{Name: "w1", Version: "1.2.3"})
	h2 := harnesstest.New(t, harness.Config{}, harness.Echo())
	_, stop2 := f.StartWorker(t, h2, workerbus.WorkerConfig{Name: "w2"})

	got := discoverN(t, f, 2)
	digest := map[string]string{}
	for _, s := range h1.Specs() {
		digest[string(s.Name)] = s.SchemaDigest
	}
	if got[0].Name != "w1" || got[0].Version != "1.2.3" || got[1].Name != "w2" || got[1].Version != workerbus.DefaultServiceVersion {
		t.Fatalf("workers = %+v, want w1 1.2.3 and w2 %s", got, workerbus.DefaultServiceVersion)
	}
	var want []discovery.DiscoveredTool
	for _, s := range h1.Specs() {
		want = append(want, discovery.DiscoveredTool{Name: s.Name, SchemaDigest: s.SchemaDigest, Timeout: s.Timeout(),
			Idempotent: s.Idempotent, RequiresApproval: s.RequiresApproval})
	}
	if !reflect.DeepEqual(got[0].Tools, want) {
		t.Fatalf("w1 tools = %+v, want %+v", got[0].Tools, want)
	}
	if conflicts := discovery.FindSchemaConflicts(got, digest); len(conflicts) != 0 {
		t.Fatalf("conflicts = %v, want none: both workers serve the built-in echo", conflicts)
	}

	// The INFO answer carries the schema itself, and a request on the
	// tool-info subject gathers every worker's spec.
	info := requestInfo(t, f.NC, "w1")
	var ep *micro.EndpointInfo
	for i := range info.Endpoints {
		if info.Endpoints[i].Name == "calculator" {
			ep = &info.Endpoints[i]
		}
	}
	if ep == nil || ep.Subject != "fleet.tool.calculator" || ep.Metadata[workerbus.MetaCallSubject] != "fleet.call.calculator.>" ||
		ep.Metadata[workerbus.MetaSchemaDigest] != digest["calculator"] {
		t.Fatalf("calculator endpoint = %+v", ep)
	}
	if d, err := protocol.SchemaDigest([]byte(ep.Metadata[workerbus.MetaSchema])); err != nil || d != digest["calculator"] {
		t.Fatalf("schema in the endpoint metadata has digest %q (%v), want %q", d, err, digest["calculator"])
	}
	if info.Metadata[workerbus.MetaTools] != "calculator,echo" || info.Metadata[workerbus.MetaPrefix] != "fleet" {
		t.Fatalf("service metadata = %v", info.Metadata)
	}
	specs := gatherToolInfo(t, f.NC, "fleet.tool.echo", 2)
	if specs["w1"].SchemaDigest != digest["echo"] || specs["w2"].SchemaDigest != digest["echo"] {
		t.Fatalf("tool-info answers = %+v, want the echo spec from w1 and w2", specs)
	}

	// STATS carries the real call counts, not the tool-info requests.
	_, run, in := f.OpenRun(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	call := bustest.NewCall(run, "calculator", `{"expression":"1+1"}`, 10*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	if r := bustest.NextResult(t, in, call.CallKey, 10*time.Second); r.Outcome != protocol.OutcomeOK {
		t.Fatalf("result = %+v", r)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		st, ok := w1.ToolStats("calculator")
		if !ok || st.Calls != 1 || st.Outcomes[protocol.OutcomeOK] != 1 || st.InFlight != 0 {
			return fmt.Errorf("calculator stats = %+v, want 1 ok call", st)
		}
		return nil
	})
	stats := requestStats(t, f.NC, info.ID)
	for _, e := range stats.Endpoints {
		if e.Name != "calculator" {
			continue
		}
		var data workerbus.ToolStats
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatalf("endpoint data %s: %v", e.Data, err)
		}
		if data.Calls != 1 || data.Outcomes[protocol.OutcomeOK] != 1 || data.CallSubject != "fleet.call.calculator.>" {
			t.Fatalf("calculator endpoint data = %+v, want one ok call", data)
		}
		if e.NumRequests != 0 {
			t.Fatalf("calculator endpoint requests = %d, want 0: calls do not travel on the tool-info subject", e.NumRequests)
		}
	}

	// A stopped worker leaves discovery.
	stop2()
	if got := discoverN(t, f, 1); got[0].Name != "w1" {
		t.Fatalf("after w2 stopped: %+v, want w1 only", got)
	}
}

func TestDiscoveryIgnoresOtherFleetsAndOptOut(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "quiet", NoDiscovery: true})
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "seen"})
	other, err := micro.AddService(f.NC, micro.Config{Name: workerbus.ServiceName, Version: "0.1.0",
		Metadata: map[string]string{workerbus.MetaPrefix: "other", workerbus.MetaWorker: "elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	got := discoverN(t, f, 1)
	if got[0].Name != "seen" {
		t.Fatalf("discovered %+v, want only the worker of this fleet that registers", got)
	}
}

func TestDiscoverWithoutWorkers(t *testing.T) {
	f := bustest.NewFleet(t)
	start := time.Now()
	got, err := discovery.Discover(bustest.Ctx(t), f.NC, f.Subjects, discovery.DiscoverConfig{Wait: 5 * time.Second})
	if err != nil || len(got) != 0 {
		t.Fatalf("Discover = %v, %v; want none", got, err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("Discover took %v with no responders, want an early answer", time.Since(start))
	}
}

func TestWorkerVersionMustBeSemver(t *testing.T) {
	for _, v := range []string{"1", "v1.0.0", "1.0", "latest"} {
		err := workerbus.WorkerConfig{Version: v}.Validate()
		var ce *natsbus.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Version" {
			t.Errorf("Version %q: Validate = %v, want a Version error", v, err)
		}
	}
	if err := (workerbus.WorkerConfig{Version: "1.2.3-rc.1+build.5"}).Validate(); err != nil {
		t.Errorf("a full semantic version is refused: %v", err)
	}
}

// requestInfo asks the worker named name for its INFO.
func requestInfo(t *testing.T, nc *nats.Conn, name string) micro.Info {
	t.Helper()
	for _, m := range gather(t, nc, "$SRV.INFO."+workerbus.ServiceName, 0) {
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err == nil && info.Metadata[workerbus.MetaWorker] == name {
			return info
		}
	}
	t.Fatalf("no INFO answer from %s", name)
	return micro.Info{}
}

// requestStats asks the service instance id for its STATS.
func requestStats(t *testing.T, nc *nats.Conn, id string) micro.Stats {
	t.Helper()
	m, err := nc.Request("$SRV.STATS."+workerbus.ServiceName+"."+id, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// gatherToolInfo sends one request on subject and decodes the specs of the
// first n answers, by the worker header.
func gatherToolInfo(t *testing.T, nc *nats.Conn, subject string, n int) map[string]protocol.ToolSpec {
	t.Helper()
	out := map[string]protocol.ToolSpec{}
	for _, m := range gather(t, nc, subject, n) {
		spec, err := protocol.DecodeToolSpec(m.Data, 0)
		if err != nil {
			t.Fatalf("tool-info answer %q: %v", m.Data, err)
		}
		out[m.Header.Get(workerbus.HeaderWorker)] = spec
	}
	return out
}

// gather sends one request on subject and collects answers: n of them, or
// (n == 0) those arriving within a second.
func gather(t *testing.T, nc *nats.Conn, subject string, n int) []*nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	for n == 0 || len(out) < n {
		m, err := sub.NextMsg(time.Second)
		if errors.Is(err, nats.ErrTimeout) && n == 0 {
			break
		}
		if err != nil {
			t.Fatalf("answer %d on %s: %v", len(out)+1, subject, err)
		}
		out = append(out, m)
	}
	return out
}

// TestDiscoveryKeepsSecretsOut serves an exec tool whose manifest passes a
// credential in its environment and whose argv names a secret file: no
// discovery answer (INFO, STATS, tool-info) may carry either.
func TestDiscoveryKeepsSecretsOut(t *testing.T) {
	const canary = "tf-canary-7d1e0c"
	tools, err := harness.ParseManifest([]byte(`{"tools":[{"name":"fetch","description":"fetches",
		"parameters":{"type":"object"},"command":["cat","/run/secrets/` + canary + `"],
		"env":{"API_KEY":"` + canary + `"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, tools...)
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "keeper"})
	discoverN(t, f, 1)
	var answers []string
	for _, subject := range []string{"$SRV.INFO." + workerbus.ServiceName, "$SRV.STATS." + workerbus.ServiceName, "$SRV.PING", "fleet.tool.fetch"} {
		for _, m := range gather(t, f.NC, subject, 1) {
			answers = append(answers, string(m.Data)+fmt.Sprint(m.Header))
		}
	}
	for _, a := range answers {
		if strings.Contains(a, canary) {
			t.Fatalf("a discovery answer carries the secret:\n%s", a)
		}
	}
}
