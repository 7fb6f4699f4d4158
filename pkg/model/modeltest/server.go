package modeltest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// MaxRequestBytes bounds a request body a fake reads.
const MaxRequestBytes = 32 << 20

// Server is the common part of a fake: a started httptest server with a
// close signal for replies that hang, the fake's handler of requests of
// type Req that decides replies of type Rep, and the [Log] of what it
// received.
type Server[Req, Rep any] struct {
	Log[Req]

	srv     *httptest.Server
	done    chan struct{}
	once    sync.Once
	handler func(n int, req *Req) Rep
}

// Start starts a server whose HTTP handler is serve and whose replies h
// decides (nil: always empty), closed when the test ends.
func Start[Req, Rep any](tb testing.TB, serve http.HandlerFunc, h func(n int, req *Req) Rep, empty Rep) *Server[Req, Rep] {
	tb.Helper()
	if h == nil {
		h = Sequence[Req](empty)
	}
	s := &Server[Req, Rep]{srv: httptest.NewServer(serve), done: make(chan struct{}), handler: h}
	tb.Cleanup(s.Close)
	return s
}

// URL is the server's root URL, without a path.
func (s *Server[Req, Rep]) URL() string { return s.srv.URL }

// Answer counts req as valid and returns its index among the valid
// requests (from 0) and the handler's reply to it.
func (s *Server[Req, Rep]) Answer(req *Req) (n int, rep Rep) {
	n = s.Accept()
	return n, s.handler(n, req)
}

// Close stops the server, releasing hanging replies first. It is
// idempotent.
func (s *Server[Req, Rep]) Close() {
	s.once.Do(func() {
		close(s.done)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// ReadBody reads r's body up to [MaxRequestBytes]; ok is false when it
// cannot be read or is larger.
func ReadBody(r *http.Request) (body []byte, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	return body, err == nil && len(body) <= MaxRequestBytes
}

// Reply is the HTTP part of a fake's reply, which every fake answers the
// same way.
type Reply struct {
	// Status is the HTTP status. Default: 200.
	Status int
	// Header is added to the response (e.g. Retry-After).
	Header http.Header
	// Body, when set, is sent verbatim as application/json.
	Body string
	// Chunked sends Body in small flushed pieces (chunked transfer
	// encoding, no Content-Length), as a streaming proxy would.
	Chunked bool
	// Hang blocks the reply until the client goes away or the server
	// closes.
	Hang bool
	// Drop closes the connection without any response: a transport error
	// for the client.
	Drop bool
}

// Write answers what rep settles by itself (a hang, a dropped connection,
// a verbatim body) and returns done; otherwise it adds rep's headers and
// returns the status (200 by default) for the fake to write its API's body
// with.
func (s *Server[Req, Rep]) Write(w http.ResponseWriter, r *http.Request, rep Reply) (status int, done bool) {
	if rep.Hang {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return 0, true
	}
	if rep.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return 0, true
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status = rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	if rep.Body == "" {
		return status, false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if !rep.Chunked {
		_, _ = io.WriteString(w, rep.Body)
		return status, true
	}
	f, _ := w.(http.Flusher)
	for b := rep.Body; b != ""; {
		n := min(len(b), 512)
		if _, err := io.WriteString(w, b[:n]); err != nil {
			return status, true
		}
		if f != nil {
			f.Flush()
		}
		b = b[n:]
	}
	return status, true
}
