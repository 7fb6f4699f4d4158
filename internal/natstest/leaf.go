package natstest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/embedded"
)

// StartHub starts a JetStream server like [Start], in JetStream domain
// domain, that also accepts leaf node connections on a random loopback port
// (see [LeafPort]). Clients of a leaf node reach its JetStream as
// $JS.<domain>.API (natsbus.ConnConfig.JSDomain).
func StartHub(t testing.TB, domain string) *embedded.Server {
	t.Helper()
	return StartWithConfig(t, fmt.Sprintf("jetstream { domain: %q }\nleafnodes { listen: \"127.0.0.1:-1\" }", domain))
}

// LeafPort returns the port on which hub accepts leaf node connections.
func LeafPort(t testing.TB, hub *embedded.Server) int {
	t.Helper()
	lz, err := hub.NATSServer().Varz(nil)
	if err != nil {
		t.Fatalf("natstest: hub varz: %v", err)
	}
	if lz.LeafNode.Port <= 0 {
		t.Fatal("natstest: the hub does not accept leaf nodes (start it with StartHub)")
	}
	return lz.LeafNode.Port
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

// Leaf is a nats-server without JetStream of its own that joins a hub as
// a leaf node, as a site or a laptop runs one: clients connect to it
// locally, and their subjects and JetStream API requests travel over the
// leaf connection to the hub.
type Leaf struct {
	t      testing.TB
	remote string
	port   int
	srv    *server.Server
}

// StartLeaf starts a leaf node on a random loopback port whose remote is
// remoteURL (host:port of the hub's leaf listener, or of a proxy in front
// of it), and waits until the leaf connection is up.
func StartLeaf(t testing.TB, remoteURL string) *Leaf {
	t.Helper()
	l := &Leaf{t: t, remote: remoteURL, port: freePort(t)}
	l.start()
	t.Cleanup(l.Shutdown)
	l.WaitConnected(30 * time.Second)
	return l
}

func (l *Leaf) start() {
	l.t.Helper()
	u, err := url.Parse("nats-leaf://" + l.remote)
	if err != nil {
		l.t.Fatalf("natstest: leaf remote %q: %v", l.remote, err)
	}
	opts := &server.Options{
		ServerName: fmt.Sprintf("leaf-%d", l.port),
		Host:       "127.0.0.1",
		Port:       l.port,
		NoSigs:     true,
		NoLog:      true,
	}
	opts.LeafNode.ReconnectInterval = 100 * time.Millisecond
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}
	srv, err := server.NewServer(opts)
	if err != nil {
		l.t.Fatalf("natstest: leaf: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		l.t.Fatal("natstest: the leaf node did not become ready")
	}
	l.srv = srv
}

// ClientURL returns the leaf's client URL.
func (l *Leaf) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", l.port) }

// Connected reports whether the leaf connection to the hub is up.
func (l *Leaf) Connected() bool { return l.srv != nil && l.srv.NumLeafNodes() > 0 }

// WaitConnected waits until the leaf connection to the hub is up.
func (l *Leaf) WaitConnected(timeout time.Duration) {
	l.t.Helper()
	WaitFor(l.t, timeout, func() error {
		if !l.Connected() {
			return fmt.Errorf("leaf node not connected to %s", l.remote)
		}
		return nil
	})
}

// Shutdown stops the leaf node. It is idempotent.
func (l *Leaf) Shutdown() {
	if l.srv != nil {
		l.srv.Shutdown()
		l.srv.WaitForShutdown()
	}
}
