package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// streamWriteTimeout bounds one write to a stream's connection: a viewer
// that stops reading is dropped, never waited for.
const streamWriteTimeout = 30 * time.Second

// errBehind ends a stream whose viewer fell StreamBuffer events behind.
var errBehind = errors.New("the viewer fell behind")

// takeStream takes one of the MaxStreams stream slots for w, and one of
// the session's MaxSessionStreams, or says why not; release gives them
// back.
func (s *Server) takeStream(w http.ResponseWriter, ss *session) (release func(), e *apiError) {
	if _, ok := w.(http.Flusher); !ok {
		return nil, errorf(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	ss.mu.Lock()
	if ss.streams >= s.cfg.MaxSessionStreams {
		ss.mu.Unlock()
		return nil, errorf(http.StatusTooManyRequests, CodeTooManyStreams, "this session has too many event streams open; close one")
	}
	ss.streams++
	ss.mu.Unlock()
	untake := func() {
		ss.mu.Lock()
		ss.streams--
		ss.mu.Unlock()
	}
	select {
	case s.streams <- struct{}{}:
		return func() { <-s.streams; untake() }, nil
	default:
		untake()
		return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "too many event streams open; try again later")
	}
}

// writeEvents writes the server-sent events of out to w as they come, a
// heartbeat comment between them, until the producer is done (then the
// stream ends), ctx ends, or a write fails or takes too long.
func (s *Server) writeEvents(ctx context.Context, w http.ResponseWriter, out chan []byte, done chan struct{}) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": stream of events\n\n")) {
		return
	}
	beat := time.NewTicker(s.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		case b := <-out:
			if !write(b) {
				return
			}
		case <-done:
			for {
				select {
				case b := <-out:
					if !write(b) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// sse is one server-sent event: its kind, its id (none when empty) and
// data as one line of JSON.
func sse(kind, id string, data any) []byte {
	js, _ := json.Marshal(data)
	b := fmt.Appendf(nil, "event: %s\n", kind)
	if id != "" {
		b = fmt.Appendf(b, "id: %s\n", id)
	}
	b = append(b, "data: "...)
	b = append(b, js...)
	return append(b, "\n\n"...)
}
