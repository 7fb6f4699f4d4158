package harness

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Go tool runs on a goroutine of its own, so that [Harness.Execute] can
// return at the call's deadline whatever the tool does, and so that a
// panic or runtime.Goexit in the tool ends only that goroutine's call.
//
// That goroutine is kept for later calls (a runner): a new goroutine
// starts with a small stack and copies it each time it grows to what a
// tool and the libraries it calls need, which costs more than most short
// tools' own work. A runner that has run a call waits up to runnerIdle
// for the next, and is back among the idle ones before its caller has the
// result, so that calls made one after the other run on one runner. A call
// takes the runner that finished last, or starts one: it never waits for
// one. A runner whose tool panicked, called runtime.Goexit or was
// abandoned runs no other call.

// runnerIdle is how long a runner waits for its next call before it
// exits.
const runnerIdle = 10 * time.Second

// goResult is what a Go tool's call produced.
type goResult struct {
	out       string
	err       error
	panicType string
	goexit    bool
}

// States of a Go tool's call.
const (
	stateRunning int32 = iota
	stateFinished
	stateAbandoned
)

// goCall is one Go tool's call, handed to a runner. Once finished, and
// its result received, it is reused; an abandoned one never is (its
// runner still holds it).
type goCall struct {
	ctx   context.Context
	run   Func
	args  []byte
	name  string
	state atomic.Int32
	done  chan goResult // buffered: the runner never waits on it
}

// goCalls holds finished goCalls for reuse.
var goCalls = sync.Pool{New: func() any { return &goCall{done: make(chan goResult, 1)} }}

// release returns a finished goCall, whose result was received, for reuse.
func (c *goCall) release() {
	c.ctx, c.run, c.args, c.name = nil, nil, nil, ""
	goCalls.Put(c)
}

// runner is a goroutine that runs Go tools' calls, one at a time.
type runner struct {
	calls chan *goCall // buffered: a runner is handed one call while idle
}

// runners are the idle runners, the one that finished last on top.
type runners struct {
	mu   sync.Mutex
	idle []*runner
}

// take removes the runner that finished last from the idle ones; nil if
// none is idle.
func (p *runners) take() *runner {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	r := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return r
}

// put adds r to the idle runners.
func (p *runners) put(r *runner) {
	p.mu.Lock()
	p.idle = append(p.idle, r)
	p.mu.Unlock()
}

// retire removes r from the idle runners, reporting whether it was idle:
// false when a call has just taken it.
func (p *runners) retire(r *runner) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, idle := range p.idle {
		if idle == r {
			p.idle = slices.Delete(p.idle, i, i+1)
			return true
		}
	}
	return false
}

// runGo runs a Go tool on a runner. It returns when the tool returns
// (finished) or shortly after tctx ends (not finished: the call is counted
// in Abandoned until the tool returns).
func (h *Harness) runGo(tctx context.Context, e *entry, args []byte) (goResult, bool) {
	c := goCalls.Get().(*goCall)
	c.ctx, c.run, c.args, c.name = tctx, e.tool.Run, args, e.tool.Name
	c.state.Store(stateRunning)
	if r := h.runners.take(); r != nil {
		r.calls <- c
	} else {
		go h.runner(&runner{calls: make(chan *goCall, 1)}, c)
	}

	select {
	case r := <-c.done:
		c.release()
		return r, true
	case <-tctx.Done():
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case r := <-c.done:
		c.release()
		return r, true
	case <-grace.C:
	}
	// Count first, so the runner's decrement can never come before it.
	n := h.abandoned.Add(1)
	if !c.state.CompareAndSwap(stateRunning, stateAbandoned) {
		h.abandoned.Add(-1)
		r := <-c.done // it is sending now
		c.release()
		return r, true
	}
	h.cfg.Logger.Warn().Str(logKeyTool, c.name).Int64(logKeyAbandoned, n).
		Msg("tool ignored its context: abandoned while still running")
	return goResult{}, false
}

// runner runs c, then each call handed to it while idle, until it has
// been idle for runnerIdle or a call did not end normally.
func (h *Harness) runner(r *runner, c *goCall) {
	var idle *time.Timer
	for h.runCall(r, c) {
		if idle == nil {
			idle = time.NewTimer(runnerIdle)
		} else {
			idle.Reset(runnerIdle)
		}
		select {
		case c = <-r.calls:
		case <-idle.C:
			if h.runners.retire(r) {
				return
			}
			c = <-r.calls // taken meanwhile: its call is on its way
		}
	}
}

// runCall runs c's tool on r and hands its result to runGo, or, when
// runGo has abandoned the call, counts its tool as returned. When the
// tool returned in time, r is idle again before runGo has the result, and
// runCall reports true: r may run another call.
func (h *Harness) runCall(r *runner, c *goCall) (idle bool) {
	var res goResult
	returned := false
	name := c.name
	defer func() {
		if p := recover(); p != nil {
			// The value and the stack may carry arguments or secrets: log
			// neither.
			res = goResult{panicType: fmt.Sprintf("panic: %T", p)}
			h.cfg.Logger.Error().Str(logKeyTool, name).Str(logKeyErrorType, res.panicType).Msg("tool panicked")
		} else if !returned {
			res = goResult{goexit: true}
		}
		if c.state.CompareAndSwap(stateRunning, stateFinished) {
			if returned {
				h.runners.put(r)
				idle = true
			}
			c.done <- res // c is runGo's from here on
			return
		}
		n := h.abandoned.Add(-1)
		h.cfg.Logger.Info().Str(logKeyTool, name).Int64(logKeyAbandoned, n).Msg("abandoned tool returned")
	}()
	res.out, res.err = c.run(c.ctx, c.args)
	returned = true
	return false
}
