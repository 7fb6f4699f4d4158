package deploy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// clusterConf and leafConf are the shipped cluster node and leaf node
// configurations.
const (
	clusterConf = "cluster/nats-server.conf"
	leafConf    = "leaf/leafnode.conf"
)

// confPassword is the password the tests give the user whose password
// variable is v.
func confPassword(v string) string {
	return "tf-" + strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(v, "TOOLFLEET_"), "_PASSWORD"))
}

// hub is the 3-node cluster of cluster/nats-server.conf.
type hub struct {
	srvs      []*server.Server
	leafAddrs []string // each node's leaf node listener
}

// urls is every node's client URL, as the fleet's --nats-url takes them.
func (h *hub) urls() string {
	var u []string
	for _, s := range h.srvs {
		u = append(u, s.ClientURL())
	}
	return strings.Join(u, ",")
}

// startClusterConf starts three servers from cluster/nats-server.conf,
// parsed by nats-server's own parser with the environment it documents
// (server name, route password, routes between loopback ports), and
// rewrites only the listeners (client, route and leaf ports on loopback)
// and the store directories.
func startClusterConf(t *testing.T) *hub {
	t.Helper()
	for v := range confVars(t) {
		t.Setenv(v, confPassword(v))
	}
	t.Setenv("TOOLFLEET_ROUTE_PASSWORD", "tf-route-5e6f7a")
	// A loopback port picked free may be taken by another test's process
	// before its node binds it; that node never listens. Start the three
	// again on other ports, a few times.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		h, notReady := startClusterNodes(t)
		if notReady == 0 {
			return h
		}
		for _, s := range h.srvs {
			s.Shutdown()
			s.WaitForShutdown()
		}
		if attempt == attempts {
			t.Fatalf("node %d not ready (%d attempts, each on other ports)", notReady, attempts)
		}
		t.Logf("node %d not ready: starting the cluster again on other ports", notReady)
	}
}

// startClusterNodes starts the three nodes of startClusterConf on fresh
// loopback ports and waits for each to listen: notReady is the first one
// that did not (numbered from 1), or 0.
func startClusterNodes(t *testing.T) (h *hub, notReady int) {
	t.Helper()
	type ports struct{ client, route, leaf string }
	nodes := make([]ports, 3)
	var routes []string
	for i := range nodes {
		nodes[i] = ports{freeAddr(t), freeAddr(t), freeAddr(t)}
		routes = append(routes, "nats-route://route:tf-route-5e6f7a@"+nodes[i].route)
	}
	t.Setenv("TOOLFLEET_ROUTES", "["+strings.Join(routes, ", ")+"]")
	h = &hub{}
	for i, n := range nodes {
		t.Setenv("TOOLFLEET_SERVER_NAME", fmt.Sprintf("toolfleet-%d", i+1))
		opts, err := server.ProcessConfigFile(clusterConf)
		if err != nil {
			t.Fatalf("%s: %v", clusterConf, err)
		}
		if i == 0 {
			checkClusterOpts(t, opts)
		}
		setAddr(t, n.client, &opts.Host, &opts.Port)
		setAddr(t, n.route, &opts.Cluster.Host, &opts.Cluster.Port)
		setAddr(t, n.leaf, &opts.LeafNode.Host, &opts.LeafNode.Port)
		opts.StoreDir = t.TempDir()
		opts.NoSigs, opts.NoLog = true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		h.srvs = append(h.srvs, s)
		h.leafAddrs = append(h.leafAddrs, n.leaf)
	}
	for i, s := range h.srvs {
		if !s.ReadyForConnections(60 * time.Second) {
			return h, i + 1
		}
	}
	return h, 0
}

// checkClusterOpts checks what the shipped cluster configuration sets, as
// parsed, before the test moves its listeners.
func checkClusterOpts(t *testing.T, o *server.Options) {
	t.Helper()
	if o.ServerName != "toolfleet-1" || o.Cluster.Name != "toolfleet" || o.Cluster.Port != 6222 || o.Port != 4222 {
		t.Errorf("server %q cluster %q route port %d client port %d, want toolfleet-1 in cluster toolfleet on 6222, clients on 4222",
			o.ServerName, o.Cluster.Name, o.Cluster.Port, o.Port)
	}
	if o.Cluster.Username != "route" || o.Cluster.Password != "tf-route-5e6f7a" {
		t.Errorf("routes authenticate as %q, want the user route with $TOOLFLEET_ROUTE_PASSWORD", o.Cluster.Username)
	}
	if len(o.Routes) != 3 {
		t.Errorf("%d routes, want the 3 of $TOOLFLEET_ROUTES", len(o.Routes))
	}
	if !o.JetStream || o.JetStreamDomain != "hub" || o.StoreDir == "" {
		t.Errorf("JetStream %v domain %q store %q, want JetStream in domain hub with a store", o.JetStream, o.JetStreamDomain, o.StoreDir)
	}
	if o.LeafNode.Port != 7422 || o.LeafNode.Username != "" || len(o.LeafNode.Users) != 0 {
		t.Errorf("leaf node listener on %d with users %q/%d, want 7422 authenticating against the fleet's users", o.LeafNode.Port, o.LeafNode.Username, len(o.LeafNode.Users))
	}
	single, err := server.ProcessConfigFile("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Users) != len(single.Users) || o.MaxPayload != single.MaxPayload {
		t.Errorf("%d users, max_payload %d; want nats-server.conf's %d, %d", len(o.Users), o.MaxPayload, len(single.Users), single.MaxPayload)
	}
}

// setAddr points a listener at addr (127.0.0.1:port).
func setAddr(t *testing.T, addr string, host *string, port *int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	*host = h
	if *port, err = strconv.Atoi(p); err != nil {
		t.Fatal(err)
	}
}

// startLeafConf starts a server from leaf/leafnode.conf whose remote is
// the hub's leaf listeners with the leaf user's password, on a loopback
// client port, and waits until the leaf connection is up.
func startLeafConf(t *testing.T, h *hub) *server.Server {
	t.Helper()
	opts := leafConfOpts(t, h)
	if opts.JetStream || len(opts.LeafNode.Remotes) != 1 || len(opts.LeafNode.Remotes[0].URLs) != 3 || opts.Host != "127.0.0.1" {
		t.Fatalf("%s: JetStream %v, %d remotes, listen %s; want no JetStream, one remote with the 3 hub URLs, loopback clients",
			leafConf, opts.JetStream, len(opts.LeafNode.Remotes), opts.Host)
	}
	opts.Port = server.RANDOM_PORT
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("leaf node not ready")
	}
	if err := eventually(30*time.Second, func() error {
		if s.NumLeafNodes() == 0 {
			return fmt.Errorf("the leaf node has not joined the hub")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// leafConfOpts parses leaf/leafnode.conf with its remote set to the hub's
// leaf listeners and the leaf user's password, as its comment documents.
func leafConfOpts(t *testing.T, h *hub) *server.Options {
	t.Helper()
	var urls []string
	for _, a := range h.leafAddrs {
		urls = append(urls, "nats-leaf://leaf:"+confPassword("TOOLFLEET_LEAF_PASSWORD")+"@"+a)
	}
	t.Setenv("TOOLFLEET_HUB_LEAF_URL", "["+strings.Join(urls, ", ")+"]")
	opts, err := server.ProcessConfigFile(leafConf)
	if err != nil {
		t.Fatalf("%s: %v", leafConf, err)
	}
	return opts
}

// procEnv is the environment of a fleet process connecting as user.
func procEnv(user, urls string, extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "NATS_URL=" + urls}
	if user != "" {
		env = append(env, "NATS_USER="+user, "NATS_PASSWORD="+confPassword("TOOLFLEET_"+strings.ToUpper(user)+"_PASSWORD"))
	}
	return append(env, extra...)
}

// waitOutput waits until p has printed want.
func waitOutput(t *testing.T, p *process, want string) {
	t.Helper()
	if err := eventually(60*time.Second, func() error {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", p.name, p.cmd.ProcessState)
		default:
		}
		if !strings.Contains(p.out.String(), want) {
			return fmt.Errorf("%s has not printed %q", p.name, want)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, tail(p.out.String(), 4000))
	}
}

// runDemo runs the bundled demo (three calculator calls) as the
// coordinator user against urls and wants its answer, each call answered
// by worker.
func runDemo(t *testing.T, bins, urls, worker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(bins, "coordinator"), "run", "--tool-timeout", "60s", "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")
	c.Env = procEnv("coordinator", urls)
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1150") {
		t.Fatalf("coordinator run: %v\n%s", err, tail(string(out), 4000))
	}
	if n := strings.Count(string(out), `"outcome":"ok","duration_ms"`); n != 3 || strings.Count(string(out), `"worker":"`+worker+`"`) != 3 {
		t.Errorf("coordinator run: want the demo's 3 calls answered ok by %s:\n%s", worker, tail(string(out), 4000))
	}
}

// TestClusterConf runs the fleet on three servers started from
// cluster/nats-server.conf: "coordinator provision --replicas 3" as admin
// gives every stream and bucket three replicas, and a coordinator and a
// toolworker, each with the three URLs, answer the demo's calls. Then an
// edge site: a leaf node from leaf/leafnode.conf joins the cluster as the
// user leaf, the hub's worker stops, and a toolworker on the leaf (in the
// hub's JetStream domain) serves the calls of a coordinator on the hub. The
// leaf user is refused everything a worker may not do.
func TestClusterConf(t *testing.T) {
	bins := imageBinaries(t)
	h := startClusterConf(t)
	urls := h.urls()

	// Provision, retried until the cluster has elected its meta leader.
	var out []byte
	if err := eventually(60*time.Second, func() (err error) {
		// (the edge site's tools: it may not create their consumers)
		c := exec.Command(filepath.Join(bins, "coordinator"), "provision", "--replicas", "3", "--timeout", "10s", "--tool-consumer", "calculator,echo")
		c.Env = procEnv("admin", urls)
		out, err = c.CombinedOutput()
		return err
	}); err != nil {
		t.Fatalf("coordinator provision --replicas 3: %v\n%s", err, out)
	}
	admin := connectTo(t, urls, "admin", "")
	for _, fs := range natsbus.FleetStreams(protocol.Subjects{}, natsbus.StreamConfig{}) {
		st, err := admin.js.Stream(t.Context(), fs.Config.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", fs.Config.Name, err)
		}
		if n := st.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s has %d replicas, want 3", fs.Config.Name, n)
		}
	}

	worker := start(t, "toolworker", filepath.Join(bins, "toolworker"), []string{"--builtin", "calculator", "--name", "hub-worker"}, procEnv("worker", urls))
	waitOutput(t, worker, "worker started")
	runDemo(t, bins, urls, "hub-worker")
	stop(t, worker)

	leaf := startLeafConf(t, h)
	edge := start(t, "edge toolworker", filepath.Join(bins, "toolworker"), []string{"--builtin", "calculator,echo", "--name", "edge-worker", "--js-domain", "hub"},
		procEnv("", leaf.ClientURL(), "NATS_INBOX_PREFIX=_INBOX_leaf"))
	waitOutput(t, edge, "worker started")
	t.Run("an edge worker on the leaf serves the hub", func(t *testing.T) {
		// It described echo, which only it serves, in the hub's catalog.
		kv, err := admin.js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(t.Context(), "echo"); err != nil {
			t.Errorf("the edge worker's echo is not in the catalog: %v", err)
		}
		runDemo(t, bins, urls, "edge-worker")
		if n := strings.Count(edge.out.String(), "call finished"); n != 3 {
			t.Errorf("the edge worker finished %d calls, want 3:\n%s", n, tail(edge.out.String(), 4000))
		}
	})

	t.Run("the leaf user may not", func(t *testing.T) { leafRefusals(t, h, leaf, admin) })
}

// stop ends p with SIGTERM and waits for it.
func stop(t *testing.T, p *process) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop", p.name)
	}
}

// conn is a test's connection and its JetStream context.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// connectTo connects to urls as user ("" for none) with that user's
// inbox prefix, in JetStream domain domain ("" for the local one).
func connectTo(t *testing.T, urls, user, domain string, opts ...nats.Option) conn {
	t.Helper()
	if user != "" {
		opts = append(opts, nats.UserInfo(user, confPassword("TOOLFLEET_"+strings.ToUpper(user)+"_PASSWORD")), nats.CustomInboxPrefix("_INBOX_"+user))
	}
	nc, err := nats.Connect(urls, append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatalf("connect as %q: %v", user, err)
	}
	t.Cleanup(nc.Close)
	var js jetstream.JetStream
	if domain != "" {
		js, err = jetstream.NewWithDomain(nc, domain, jetstream.WithDefaultTimeout(2*time.Second))
	} else {
		js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(5*time.Second))
	}
	if err != nil {
		t.Fatal(err)
	}
	return conn{nc, js}
}

// leafRefusals performs, from a client of the leaf node (whose every
// message into the hub the leaf user's permissions bound), what an edge
// site must not do, and checks on the hub that none of it happened; each
// refusal is set against an allowed request of the same kind that
// succeeds, so a leaf link that is simply down cannot pass for a refusal.
func leafRefusals(t *testing.T, h *hub, leaf *server.Server, admin conn) {
	ctx := t.Context()
	subjects := protocol.Subjects{}
	edge := connectTo(t, leaf.ClientURL(), "", "hub", nats.CustomInboxPrefix("_INBOX_leaf"))
	coord := connectTo(t, h.urls(), "coordinator", "")
	op := connectTo(t, h.urls(), "operator", "")

	// Allowed: the JetStream API of the streams a worker uses.
	if _, err := edge.js.Stream(ctx, subjects.CallsStream()); err != nil {
		t.Fatalf("the leaf reading %s's info (allowed): %v", subjects.CallsStream(), err)
	}
	// Refused: the run journals, the approvals as a stream, the runs.
	for _, stream := range []string{subjects.JournalStream(), subjects.RunsStream(), "KV_" + subjects.RunsBucket()} {
		if _, err := edge.js.Stream(ctx, stream); err == nil {
			t.Errorf("the leaf read stream %s's info", stream)
		}
	}
	journal := subjects.JournalStream()
	peek := jetstream.ConsumerConfig{Durable: "peek", FilterSubject: subjects.JournalSubjects()}
	if _, err := edge.js.CreateOrUpdateConsumer(ctx, journal, peek); err == nil {
		t.Errorf("the leaf created a consumer on %s", journal)
	}
	// (the same consumer is one the server accepts, from a user allowed to)
	if _, err := admin.js.CreateOrUpdateConsumer(ctx, journal, peek); err != nil {
		t.Fatalf("admin creating the consumer the leaf was refused: %v", err)
	}
	if err := admin.js.DeleteConsumer(ctx, journal, "peek"); err != nil {
		t.Fatal(err)
	}
	if _, err := edge.js.CreateOrUpdateConsumer(ctx, subjects.ApprovalsStream(), jetstream.ConsumerConfig{Durable: "peek"}); err == nil {
		t.Errorf("the leaf created a consumer on %s", subjects.ApprovalsStream())
	}
	if _, err := edge.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EDGE_COPY", Subjects: []string{"edge.>"}}); err == nil {
		t.Error("the leaf created a stream")
	}
	if _, err := edge.js.UpdateStream(ctx, natsbus.FleetStreams(subjects, natsbus.StreamConfig{ResultsMaxAge: time.Second})[1].Config); err == nil {
		t.Error("the leaf changed the results stream")
	}
	// Nor the calls, or the catalog entry, of a tool with workers of its own.
	if _, err := edge.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "tool_deploy", FilterSubject: "fleet.call.deploy.interactive.*", AckPolicy: jetstream.AckExplicitPolicy,
	}); err == nil {
		t.Error("the leaf created the consumer of deploy")
	}
	if kv, err := edge.js.KeyValue(ctx, subjects.CatalogBucket()); err != nil {
		t.Errorf("the leaf opening the catalog (allowed): %v", err)
	} else if _, err := kv.Put(ctx, "deploy", []byte(`{}`)); err == nil {
		t.Error("the leaf described deploy in the catalog")
	}
	if _, err := admin.js.Stream(ctx, "EDGE_COPY"); err == nil {
		t.Error("stream EDGE_COPY exists on the hub")
	}

	// Publishing calls: a worker answers them, it never makes them.
	before := msgs(t, admin, subjects.CallsStream())
	if _, err := edge.js.Publish(ctx, "fleet.call.calculator.interactive.local", []byte(`{}`)); err == nil {
		t.Error("the leaf published a call")
	}
	if got := msgs(t, admin, subjects.CallsStream()); got != before {
		t.Errorf("%s holds %d messages after the leaf's call, %d before", subjects.CallsStream(), got, before)
	}

	// Approvals: the leaf neither forges a decision nor sees a request.
	decisions, err := op.nc.SubscribeSync("fleet.approval.decision.>")
	if err != nil {
		t.Fatal(err)
	}
	requests, err := edge.nc.SubscribeSync("fleet.approval.>")
	if err != nil {
		t.Fatal(err)
	}
	cancels, err := edge.nc.SubscribeSync("fleet.cancel.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := edge.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := op.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The cancel reaching the leaf shows the hub knows the leaf's
	// subscriptions: the approval request published with it does not.
	if err := eventually(20*time.Second, func() error {
		if err := coord.nc.Publish("fleet.approval.request.run1.key1", []byte(`{}`)); err != nil {
			return err
		}
		if err := coord.nc.Publish("fleet.cancel.run1.key1", []byte(`{}`)); err != nil {
			return err
		}
		_, err := cancels.NextMsg(500 * time.Millisecond)
		return err
	}); err != nil {
		t.Fatalf("a cancel published on the hub did not reach the leaf: %v", err)
	}
	if m, err := requests.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("the leaf received %s", m.Subject)
	}
	// A result reaching the hub shows the leaf's messages get there: the
	// decision published with it does not.
	results, err := coord.nc.SubscribeSync("fleet.result.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := eventually(20*time.Second, func() error {
		if err := edge.nc.Publish("fleet.approval.decision.run1.key1", []byte(`{"approved":true}`)); err != nil {
			return err
		}
		if err := edge.nc.Publish("fleet.result.run1.calculator", []byte(`{}`)); err != nil {
			return err
		}
		_, err := results.NextMsg(500 * time.Millisecond)
		return err
	}); err != nil {
		t.Fatalf("a result published on the leaf did not reach the hub: %v", err)
	}
	if m, err := decisions.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("the operator received %s from the leaf", m.Subject)
	}
	if leaf.NumLeafNodes() == 0 {
		t.Error("the leaf connection dropped")
	}
}

// msgs is the number of messages stream holds.
func msgs(t *testing.T, c conn, stream string) uint64 {
	t.Helper()
	st, err := c.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}
