package modeltest

import "sync"

// Log records the requests of type R a fake received, counts those that
// passed its checks and keeps the messages of those it refused. It is safe
// for concurrent use; its zero value is empty.
type Log[R any] struct {
	mu       sync.Mutex
	requests []*R
	valid    int
	rejected []string
}

// Add records req, valid or not.
func (l *Log[R]) Add(req *R) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, req)
}

// Reject records the message a request was refused with.
func (l *Log[R]) Reject(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected = append(l.rejected, msg)
}

// Accept counts a request that passed the checks and returns its index
// among them, from 0: the n a handler answers.
func (l *Log[R]) Accept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.valid
	l.valid++
	return n
}

// Requests returns every request recorded so far.
func (l *Log[R]) Requests() []*R {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*R(nil), l.requests...)
}

// Rejected returns the messages of the refused requests.
func (l *Log[R]) Rejected() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.rejected...)
}

// Sequence answers the n-th valid request with replies[n] and every later
// one with the last reply; with no replies, always with empty.
func Sequence[Req, Rep any](empty Rep, replies ...Rep) func(n int, req *Req) Rep {
	return func(n int, _ *Req) Rep {
		if len(replies) == 0 {
			return empty
		}
		return replies[min(n, len(replies)-1)]
	}
}
