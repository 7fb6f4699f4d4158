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
// tools' own work. A runner that has run a call is back among the idle
// ones before its caller has the result, so that calls made one after the
// other run on one runner. A call takes the runner that finished last, or
// starts one: it never waits for one. A runner that has been idle, with no
// call, for runnerIdle (checked every runnerIdle) exits, and so does one
// whose tool panicked, called runtime.Goexit or was abandoned.

// runnerIdle is how long a runner stays idle before it exits, at least;
// at most twice as long.
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
	calls chan *goCall // buffered: a runner is handed one call while idle; nil: exit
	check *time.Timer  // its idle check, every runnerIdle

	// Under runners.mu:
	taken  uint64 // calls handed to it
	seen   uint64 // taken at its last idle check
	exited bool
}

// runners are the idle runners, the one that finished last on top.
type runners struct {
	mu   sync.Mutex
	idle []*runner
	// idleFor replaces runnerIdle in tests (export_test.go); 0: runnerIdle.
	idleFor time.Duration
}

// idleCheck is the time between a runner's idle checks.
func (p *runners) idleCheck() time.Duration {
	if p.idleFor > 0 {
		return p.idleFor
	}
	return runnerIdle
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
	r.taken++
	return r
}

// put adds r to the idle runners.
func (p *runners) put(r *runner) {
	p.mu.Lock()
	p.idle = append(p.idle, r)
	p.mu.Unlock()
}

// start starts a runner for c.
func (p *runners) start(h *Harness, c *goCall) {
	r := &runner{calls: make(chan *goCall, 1), taken: 1}
	p.mu.Lock() // checkIdle reads r.check
	r.check = time.AfterFunc(p.idleCheck(), func() { p.checkIdle(r) })
	p.mu.Unlock()
	go h.runner(r, c)
}

// checkIdle tells r to exit if it is idle and was handed no call since
// its last check, and otherwise checks again after runnerIdle. The check
// runs on a timer, not in the runner's wait for its next call, which is a
// plain receive.
func (p *runners) checkIdle(r *runner) {
	p.mu.Lock()
	if r.exited {
		p.mu.Unlock()
		return
	}
	if i := slices.Index(p.idle, r); i >= 0 && r.taken == r.seen {
		p.idle = slices.Delete(p.idle, i, i+1)
		r.exited = true
		p.mu.Unlock()
		r.calls <- nil
		return
	}
	r.seen = r.taken
	p.mu.Unlock()
	r.check.Reset(p.idleCheck())
}

// exit records that r has exited, and stops its idle check.
func (p *runners) exit(r *runner) {
	p.mu.Lock()
	r.exited = true
	p.mu.Unlock()
	r.check.Stop()
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
		h.runners.start(h, c)
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

// runner runs c, then each call handed to it while idle, until it is
// told to exit (idle for runnerIdle) or a call did not end normally.
func (h *Harness) runner(r *runner, c *goCall) {
	defer h.runners.exit(r)
	for h.runCall(r, c) {
		if c = <-r.calls; c == nil {
			return
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
