package workerbus_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// link is a TCP forwarder between clients and the server that delays every
// byte by a latency in each direction and can freeze: it then holds what
// it reads, both ways, until thaw — a stalled link or a frozen process,
// with nothing lost and no reconnect.
type link struct {
	ln      net.Listener
	target  string
	latency time.Duration

	mu     sync.Mutex
	thawed chan struct{} // closed unless frozen
	conns  []net.Conn
	wg     sync.WaitGroup
}

// newLink forwards a loopback port to the server at url (nats://host:port).
func newLink(t *testing.T, url string, latency time.Duration) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, target: strings.TrimPrefix(url, "nats://"), latency: latency, thawed: make(chan struct{})}
	close(l.thawed)
	l.wg.Go(l.accept)
	t.Cleanup(func() {
		ln.Close()
		l.thaw()
		l.mu.Lock()
		for _, c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l
}

func (l *link) url() string { return "nats://" + l.ln.Addr().String() }

// connect opens a connection through the link, closed when the test ends.
func (l *link) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(l.url(), nats.Name(t.Name()), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatalf("connecting through the link: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// freeze holds all traffic until thaw.
func (l *link) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.thawed:
		l.thawed = make(chan struct{})
	default:
	}
}

// thaw lets the held traffic through, in order.
func (l *link) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.thawed:
	default:
		close(l.thawed)
	}
}

func (l *link) waitThawed() {
	l.mu.Lock()
	ch := l.thawed
	l.mu.Unlock()
	<-ch
}

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		l.wg.Go(func() { l.pipe(up, c) })
		l.wg.Go(func() { l.pipe(c, up) })
	}
}

// pipe copies src to dst, each chunk latency after it was read and only
// while the link is not frozen, in order.
func (l *link) pipe(dst, src net.Conn) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(l.latency), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			pause(d)
		}
		l.waitThawed()
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range q {
	}
}
