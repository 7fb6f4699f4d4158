package mcpserve

import (
	"net"
	"sync"
	"time"
)

// Defaults of the HTTP transport's connection bounds (cmd/coordinator mcp).
const (
	// DefaultMaxConnsPerAddr bounds the connections one client address
	// (IP) holds open at once.
	DefaultMaxConnsPerAddr = 64
	// DefaultIdleTimeout closes a keep-alive connection that sent no
	// request for this long.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultReadTimeout bounds the reading of a request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds a response, from the end of its request's
	// headers: it must exceed the longest call (an approval's wait and the
	// tool's timeout).
	DefaultWriteTimeout = 15 * time.Minute
)

// LimitPerAddr returns a listener whose Accept closes at once every
// connection from a client address (IP, whatever its port) that already
// holds max open connections, so clients that open many connections and
// never send a request cannot take every file descriptor of the process
// from the others. max <= 0 means [DefaultMaxConnsPerAddr].
func LimitPerAddr(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		max = DefaultMaxConnsPerAddr
	}
	return &perAddrListener{Listener: ln, max: max, open: map[string]int{}}
}

type perAddrListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[string]int
}

// Accept returns the next connection whose address is under its bound.
func (l *perAddrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		l.mu.Lock()
		ok := l.open[addr] < l.max
		if ok {
			l.open[addr]++
		}
		l.mu.Unlock()
		if !ok {
			c.Close()
			continue
		}
		return &countedConn{Conn: c, release: func() { l.release(addr) }}, nil
	}
}

func (l *perAddrListener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// countedConn gives its address's slot back once, when closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
