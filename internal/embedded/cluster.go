package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterConfig configures [StartCluster]. The zero value is not usable:
// Nodes and StoreDir are required.
type ClusterConfig struct {
	// Nodes is the number of servers, 1 or more.
	Nodes int
	// StoreDir is the parent of the nodes' JetStream stores (one
	// directory per node).
	StoreDir string
	// ConfigText is nats-server configuration applied to every node
	// (accounts, authorization). Listeners, server names, routes and
	// stores are chosen by StartCluster.
	ConfigText string
	// NodeTags are the server_tags of each node, by index (node i gets
	// NodeTags[i]; nodes past the end get none), for stream placement.
	NodeTags [][]string
	// ReadyTimeout bounds the wait for each node and for the meta group.
	// Default: 1m.
	ReadyTimeout time.Duration
}

// Cluster is a JetStream cluster of nats-servers in this process, on
// loopback, joined by routes. Every node keeps its ports and store, so a
// killed node restarted with [Cluster.Restart] is found again by clients
// and the other nodes.
type Cluster struct {
	cfg   ClusterConfig
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name                    string
	storeDir                string
	clientPort, clusterPort int
	srv                     *server.Server // nil while the node is down
}

// StartCluster starts the nodes, each with a free loopback client and
// cluster port, and waits until every node is ready and the JetStream meta
// group has a leader.
func StartCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes < 1 || cfg.StoreDir == "" {
		return nil, errors.New("embedded: a cluster needs Nodes >= 1 and a StoreDir")
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = time.Minute
	}
	// A port that was free a moment ago may be taken (by another listener,
	// or as the local port of an outgoing connection) before a node binds
	// it: the node then never becomes ready. Such a start is retried on
	// new ports, in a store directory of its own.
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var c *Cluster
		storeDir := cfg.StoreDir
		if attempt > 1 {
			storeDir = filepath.Join(cfg.StoreDir, fmt.Sprintf("start%d", attempt))
		}
		if c, err = startCluster(cfg, storeDir); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// startAttempts bounds how often StartCluster tries to start a cluster.
const startAttempts = 3

func startCluster(cfg ClusterConfig, storeDir string) (*Cluster, error) {
	c := &Cluster{cfg: cfg}
	for i := range cfg.Nodes {
		n := &clusterNode{name: fmt.Sprintf("n%d", i+1), storeDir: filepath.Join(storeDir, fmt.Sprintf("n%d", i+1))}
		var err error
		if n.clientPort, err = freePort(); err == nil {
			n.clusterPort, err = freePort()
		}
		if err == nil {
			err = os.MkdirAll(n.storeDir, 0o700)
		}
		if err != nil {
			return nil, fmt.Errorf("embedded: cluster node %s: %w", n.name, err)
		}
		c.nodes = append(c.nodes, n)
	}
	// A clustered JetStream server is ready only once it has found its
	// peers: start every node, then wait for each.
	for i := range c.nodes {
		if err := c.launch(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	for i := range c.nodes {
		if err := c.waitReady(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.WaitForMetaLeader(cfg.ReadyTimeout); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) options(i int) (*server.Options, error) {
	node := c.nodes[i]
	opts := &server.Options{}
	if c.cfg.ConfigText != "" {
		if err := opts.ProcessConfigString(c.cfg.ConfigText); err != nil {
			return nil, fmt.Errorf("embedded: cluster configuration: %w", err)
		}
	}
	opts.ServerName = node.name
	if i < len(c.cfg.NodeTags) {
		opts.Tags = append(opts.Tags[:0:0], c.cfg.NodeTags[i]...)
	}
	opts.Host, opts.Port = DefaultHost, node.clientPort
	opts.JetStream, opts.StoreDir = true, node.storeDir
	opts.NoSigs, opts.NoLog = true, true
	opts.Cluster.Name = "toolfleet"
	opts.Cluster.Host, opts.Cluster.Port = DefaultHost, node.clusterPort
	opts.Routes = nil
	for j, other := range c.nodes {
		if j == i {
			continue
		}
		u := &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("%s:%d", DefaultHost, other.clusterPort)}
		if opts.Cluster.Username != "" {
			u.User = url.UserPassword(opts.Cluster.Username, opts.Cluster.Password)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return opts, nil
}

func (c *Cluster) launch(i int) error {
	opts, err := c.options(i)
	if err != nil {
		return err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embedded: cluster node %s: %w", c.nodes[i].name, err)
	}
	srv.Start()
	c.mu.Lock()
	c.nodes[i].srv = srv
	c.mu.Unlock()
	return nil
}

func (c *Cluster) waitReady(i int) error {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.mu.Unlock()
	if srv == nil || !srv.ReadyForConnections(c.cfg.ReadyTimeout) {
		return fmt.Errorf("embedded: cluster node %s did not become ready", c.nodes[i].name)
	}
	return nil
}

// Len returns the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// ClientURL returns node i's client URL.
func (c *Cluster) ClientURL(i int) string {
	return fmt.Sprintf("nats://%s:%d", DefaultHost, c.nodes[i].clientPort)
}

// URLs returns every node's client URL, comma-separated, as nats.Connect
// and the --nats-url flags take them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.ClientURL(i)
	}
	return strings.Join(urls, ",")
}

// Server returns node i's running server, or nil while it is down.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// Kill shuts node i down at once (its store stays), as a crash would.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart starts a killed node again on its ports and store and waits
// until it is ready.
func (c *Cluster) Restart(i int) error {
	if c.Server(i) != nil {
		return fmt.Errorf("embedded: cluster node %s is running", c.nodes[i].name)
	}
	if err := c.launch(i); err != nil {
		return err
	}
	return c.waitReady(i)
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
	for i := range c.nodes {
		if srv := c.Server(i); srv != nil && srv.JetStreamIsStreamLeader(account, stream) {
			return i
		}
	}
	return -1
}

// NodeOf returns the index of the running node a client connection named
// name (nats.Name) is connected to, or -1.
func (c *Cluster) NodeOf(name string) int {
	for i := range c.nodes {
		srv := c.Server(i)
		if srv == nil {
			continue
		}
		cz, err := srv.Connz(&server.ConnzOptions{})
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
// account ("" for the global account) holds.
func (c *Cluster) StoredMsgs(i int, account, stream string) (uint64, error) {
	if account == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	srv := c.Server(i)
	if srv == nil {
		return 0, fmt.Errorf("embedded: cluster node %s is down", c.nodes[i].name)
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
	return 0, fmt.Errorf("embedded: cluster node %s has no copy of stream %s", c.nodes[i].name, stream)
}

// MetaCurrent returns nil once a running node leads the JetStream meta
// group, every running node is current with it, and the leader counts
// every running node online (has its stats), which placing a replicated
// stream on them needs: just after a start the leader may still count a
// peer offline and refuse an R3 stream with "no suitable peers".
func (c *Cluster) MetaCurrent() error {
	var leader *server.Server
	running := 0
	for i := range c.nodes {
		srv := c.Server(i)
		if srv == nil {
			continue
		}
		running++
		if srv.JetStreamIsLeader() {
			leader = srv
		}
		if !srv.JetStreamIsCurrent() {
			return fmt.Errorf("node %s is not current with the meta group", c.nodes[i].name)
		}
	}
	if leader == nil {
		return errors.New("no meta leader")
	}
	if online := len(leader.JetStreamClusterPeers()); online < running {
		return fmt.Errorf("the meta leader counts %d of %d running nodes online", online, running)
	}
	return nil
}

// WaitForMetaLeader waits up to timeout for [Cluster.MetaCurrent].
func (c *Cluster) WaitForMetaLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.MetaCurrent()
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("embedded: cluster: %w after %v", err, timeout)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}
