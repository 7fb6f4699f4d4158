package mcpserve_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/mcpserve"
)

// TestLimitPerAddr: an address holding its bound of connections gets its
// next one closed as accepted; another address is served meanwhile, and a
// closed connection gives its slot back.
func TestLimitPerAddr(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := mcpserve.LimitPerAddr(raw, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	next := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}
	dial("127.0.0.1")
	first := next()
	dial("127.0.0.1")
	next()
	over := dial("127.0.0.1")
	// Another address is accepted while the first is at its bound.
	dial("127.0.0.2")
	if c := next(); c.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.2" {
		t.Fatalf("accepted %v, want the connection from 127.0.0.2", c.RemoteAddr())
	}
	over.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection past the bound: read %v, want EOF (closed as accepted)", err)
	}
	first.Close()
	dial("127.0.0.1")
	if c := next(); c.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
		t.Fatalf("accepted %v after a slot was given back, want 127.0.0.1", c.RemoteAddr())
	}
}
