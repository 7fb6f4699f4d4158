package natstest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of embedded nats-servers on loopback,
// joined by routes, each with its own random client and cluster ports and
// its own store under t.TempDir(). A node can be killed and restarted on the
// same ports and store, so clients and the other nodes find it again.
type Cluster struct {
	t     testing.TB
	name  string
	conf  string
	mu    sync.Mutex
	nodes []*ClusterNode
}

// ClusterNode is one server of a [Cluster].
type ClusterNode struct {
	Name        string
	storeDir    string
	clientPort  int
	clusterPort int
	srv         *server.Server // nil while the node is down
}

// StartCluster starts an n-node JetStream cluster (n ≥ 1) and waits until
// its meta group has a leader. It shuts every node down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithConfig(t, n, "")
}

// StartClusterWithConfig is [StartCluster] with nats-server configuration
// text applied to every node (accounts, authorization, a cluster block's
// own settings). Listeners, server names, routes and stores are still
// chosen here; a cluster block in confText, if any, keeps its
// authorization.
func StartClusterWithConfig(t testing.TB, n int, confText string) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: a cluster needs at least one node, got %d", n)
	}
	c := &Cluster{t: t, name: "toolfleet-test", conf: confText}
	// Every node gets its ports now, so each can route to all the others
	// from the start and a restarted node is found at the same address.
	for i := range n {
		c.nodes = append(c.nodes, &ClusterNode{
			Name:        fmt.Sprintf("n%d", i+1),
			storeDir:    t.TempDir(),
			clientPort:  freePort(t),
			clusterPort: freePort(t),
		})
	}
	t.Cleanup(c.Shutdown)
	for i := range c.nodes {
		c.launch(i)
	}
	for i := range c.nodes {
		c.waitReady(i)
	}
	c.WaitForMetaLeader(30 * time.Second)
	return c
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *Cluster) options(i int) *server.Options {
	c.t.Helper()
	node := c.nodes[i]
	opts := &server.Options{}
	if c.conf != "" {
		if err := opts.ProcessConfigString(c.conf); err != nil {
			c.t.Fatalf("natstest: cluster configuration: %v", err)
		}
	}
	opts.ServerName = node.Name
	opts.Host, opts.Port = "127.0.0.1", node.clientPort
	opts.JetStream, opts.StoreDir = true, node.storeDir
	opts.NoSigs, opts.NoLog = true, true
	opts.Cluster.Name = c.name
	opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", node.clusterPort
	var routes []*url.URL
	for j, other := range c.nodes {
		if j == i {
			continue
		}
		u := &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", other.clusterPort)}
		if opts.Cluster.Username != "" {
			u.User = url.UserPassword(opts.Cluster.Username, opts.Cluster.Password)
		}
		routes = append(routes, u)
	}
	opts.Routes = routes
	return opts
}

// launch starts node i without waiting for it: a clustered JetStream
// server is ready only once it has found its peers.
func (c *Cluster) launch(i int) {
	c.t.Helper()
	srv, err := server.NewServer(c.options(i))
	if err != nil {
		c.t.Fatalf("natstest: node %s: %v", c.nodes[i].Name, err)
	}
	srv.Start()
	c.mu.Lock()
	c.nodes[i].srv = srv
	c.mu.Unlock()
}

func (c *Cluster) waitReady(i int) {
	c.t.Helper()
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.mu.Unlock()
	if !srv.ReadyForConnections(time.Minute) {
		c.t.Fatalf("natstest: node %s did not become ready", c.nodes[i].Name)
	}
}

// Nodes returns the cluster's nodes, in start order.
func (c *Cluster) Nodes() []*ClusterNode { return c.nodes }

// ClientURL returns the node's client URL (nats://127.0.0.1:port).
func (n *ClusterNode) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort) }

// Server returns the node's running server, or nil while it is down.
func (n *ClusterNode) Server() *server.Server { return n.srv }

// URLs returns every node's client URL, comma-separated, as nats.Connect
// and the --nats-url flags take them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Kill shuts node i down at once (its store stays), as a crash would.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart starts a killed node again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	up := c.nodes[i].srv != nil
	c.mu.Unlock()
	if up {
		c.t.Fatalf("natstest: node %s is running", c.nodes[i].Name)
	}
	c.launch(i)
	c.waitReady(i)
}

// Shutdown stops every node. It is idempotent.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// StreamLeader returns the index of the node that leads stream in account
// ("" for the global account), or -1 when no running node does.
func (c *Cluster) StreamLeader(account, stream string) int {
	if account == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.srv != nil && n.srv.JetStreamIsStreamLeader(account, stream) {
			return i
		}
	}
	return -1
}

// WaitForStreamLeader waits until a running node leads stream and returns
// its index.
func (c *Cluster) WaitForStreamLeader(account, stream string, timeout time.Duration) int {
	c.t.Helper()
	leader := -1
	WaitFor(c.t, timeout, func() error {
		if leader = c.StreamLeader(account, stream); leader < 0 {
			return fmt.Errorf("no leader for stream %s", stream)
		}
		return nil
	})
	return leader
}

// NodeOf returns the index of the running node a client connection named
// name (nats.Name) is connected to, or -1.
func (c *Cluster) NodeOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.srv == nil {
			continue
		}
		cz, err := n.srv.Connz(&server.ConnzOptions{})
		if err != nil {
			continue
		}
		for _, ci := range cz.Conns {
			if ci.Name == name {
				return i
			}
		}
	}
	return -1
}

// StoredMsgs returns how many messages node i's own copy of stream in
// account ("" for the global account) holds, or an error while the node is
// down or has no copy.
func (c *Cluster) StoredMsgs(i int, account, stream string) (uint64, error) {
	if account == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.mu.Unlock()
	if srv == nil {
		return 0, fmt.Errorf("node %s is down", c.nodes[i].Name)
	}
	jsz, err := srv.Jsz(&server.JSzOptions{Account: account, Streams: true})
	if err != nil {
		return 0, err
	}
	for _, acc := range jsz.AccountDetails {
		for _, sd := range acc.Streams {
			if sd.Name == stream {
				return sd.State.Msgs, nil
			}
		}
	}
	return 0, fmt.Errorf("node %s has no copy of stream %s", c.nodes[i].Name, stream)
}

// WaitForMetaLeader waits until a running node leads the JetStream meta
// group and every running node is current with it.
func (c *Cluster) WaitForMetaLeader(timeout time.Duration) {
	c.t.Helper()
	WaitFor(c.t, timeout, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		leader := false
		for _, n := range c.nodes {
			if n.srv == nil {
				continue
			}
			if n.srv.JetStreamIsLeader() {
				leader = true
			}
			if !n.srv.JetStreamIsCurrent() {
				return fmt.Errorf("node %s is not current with the meta group", n.Name)
			}
		}
		if !leader {
			return fmt.Errorf("no meta leader")
		}
		return nil
	})
}
