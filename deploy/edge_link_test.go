package deploy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// edgeLink is an edge site speaking the leaf node protocol on its own
// link to the hub, as a site that runs its own software in place of a
// stock leaf node can: it sends whatever it likes on the link (LMSG, LS+),
// with the credentials of the site's leaf node, and reads what the hub
// delivers to it.
type edgeLink struct {
	t    *testing.T
	conn net.Conn

	wmu   sync.Mutex // serialises writes
	pongs chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	msgs []edgeMsg
	errs []string
}

// edgeMsg is a message the hub delivered on the link.
type edgeMsg struct {
	subject, reply string
	data           []byte
}

// dialEdgeLink opens a leaf node connection to the hub at u (a URL of the
// leaf node's remote, with its user and password) and waits until the hub
// accepted it.
func dialEdgeLink(t *testing.T, u *url.URL) *edgeLink {
	t.Helper()
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatalf("edge link: dial %s: %v", u.Host, err)
	}
	l := &edgeLink{t: t, conn: conn, pongs: make(chan struct{}, 16), done: make(chan struct{})}
	t.Cleanup(func() { conn.Close(); <-l.done })
	r := bufio.NewReaderSize(conn, 1<<16)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("edge link: want the hub's INFO, got %q, %v", line, err)
	}
	pw, _ := u.User.Password()
	l.send(fmt.Sprintf(`CONNECT {"user":%q,"pass":%q,"name":"edge-site","protocol":1}`+"\r\n", u.User.Username(), pw))
	go l.read(r)
	l.ping()
	return l
}

// send writes raw protocol lines on the link.
func (l *edgeLink) send(proto string) {
	l.t.Helper()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if _, err := l.conn.Write([]byte(proto)); err != nil {
		l.t.Fatalf("edge link: write: %v", err)
	}
}

// sub tells the hub the site has interest in subject (LS+).
func (l *edgeLink) sub(subject string) { l.send("LS+ " + subject + "\r\n") }

// pub sends a message from the site into the hub (LMSG), with reply
// subject reply ("" for none).
func (l *edgeLink) pub(subject, reply string, data []byte) {
	head := "LMSG " + subject + " "
	if reply != "" {
		head += reply + " "
	}
	l.send(head + strconv.Itoa(len(data)) + "\r\n" + string(data) + "\r\n")
}

// ping sends PING and waits for the hub's PONG: the hub has read and
// routed everything sent before it.
func (l *edgeLink) ping() {
	l.t.Helper()
	l.send("PING\r\n")
	select {
	case <-l.pongs:
	case <-l.done:
		l.t.Fatalf("edge link: the hub closed the connection: %v", l.errors())
	case <-time.After(30 * time.Second):
		l.t.Fatal("edge link: no PONG from the hub")
	}
}

// received returns the messages delivered on subjects starting with
// prefix so far.
func (l *edgeLink) received(prefix string) []edgeMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []edgeMsg
	for _, m := range l.msgs {
		if strings.HasPrefix(m.subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// errors returns the -ERR lines the hub sent.
func (l *edgeLink) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}

// read parses what the hub sends until the connection closes: it answers
// PINGs, passes PONGs to ping, and keeps LMSGs and -ERRs.
func (l *edgeLink) read(r *bufio.Reader) {
	defer close(l.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		op, args, _ := strings.Cut(line, " ")
		switch op {
		case "PING":
			l.wmu.Lock()
			_, _ = l.conn.Write([]byte("PONG\r\n"))
			l.wmu.Unlock()
		case "PONG":
			l.pongs <- struct{}{}
		case "-ERR":
			l.mu.Lock()
			l.errs = append(l.errs, args)
			l.mu.Unlock()
		case "LMSG":
			f := strings.Fields(args)
			if len(f) < 2 {
				return
			}
			size, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			m := edgeMsg{subject: f[0], data: buf[:size]}
			if len(f) == 3 {
				m.reply = f[1]
			}
			l.mu.Lock()
			l.msgs = append(l.msgs, m)
			l.mu.Unlock()
		}
	}
}
