package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	// execWaitDelay bounds how long Execute waits for an exec tool's pipes
	// to close after the process exited or was killed (a process that left
	// the group may hold them).
	execWaitDelay = 100 * time.Millisecond
	// maxStderrBytes bounds the stderr kept (for logging only).
	maxStderrBytes = 8 << 10
	// stdoutSlack is added to 4 bytes per rune of the output bound.
	stdoutSlack = 16
)

// command is how an exec tool runs.
type command struct {
	path string   // absolute path of the program
	argv []string // argv[0] as written in the manifest, then its arguments
	env  []string // the complete environment: PATH and the manifest's env
	// user is who the tool runs as; nil: the worker's own user.
	user *runAs
	// limits are the tool's OS limits.
	limits Limits
}

// run is the tool's [Func], for callers that run the tool directly: it
// reports a non-zero exit as an *exec.ExitError and bounds the output to
// [DefaultMaxOutputChars].
func (c *command) run(ctx context.Context, args json.RawMessage) (string, error) {
	r := c.exec(ctx, args, DefaultMaxOutputChars)
	if r.err != nil {
		return "", r.err
	}
	out, _ := protocol.Truncate(r.stdout, DefaultMaxOutputChars)
	return out, nil
}

// execRun is what one run of a command produced.
type execRun struct {
	stdout    string
	stdoutCut bool // more bytes were written than kept
	stderr    []byte
	stderrLen int64
	pid       int
	started   bool
	err       error // from Start or Wait (nil, *exec.ExitError, exec.ErrWaitDelay, ...)
	// sup is what the supervisor reported (Linux), nil without one.
	sup *supStatus
}

// exec runs the command with args on stdin until it exits or ctx ends, when
// its whole process group is killed. stdout is kept up to limitRunes*4+slack
// bytes and the rest discarded, so the process can finish.
func (c *command) exec(ctx context.Context, args []byte, limitRunes int) execRun {
	stdout := &boundedBuffer{max: limitRunes*4 + stdoutSlack}
	stderr := &boundedBuffer{max: maxStderrBytes}
	cmd := exec.CommandContext(ctx, c.path)
	cmd.Args = append([]string(nil), c.argv...)
	cmd.Env = append(make([]string, 0, len(c.env)+1), c.env...) // never nil: nil inherits the worker's
	if key := CallKeyFrom(ctx); key != "" {
		cmd.Env = append(cmd.Env, EnvCallKey+"="+key)
	}
	cmd.Stdin = bytes.NewReader(args)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	diesWithWorker(cmd.SysProcAttr)
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = execWaitDelay

	var r execRun
	prog, err := progressPipe(ctx, cmd)
	if err != nil {
		r.err = err
		return r
	}
	defer prog.close()
	sup, err := c.supervised(cmd)
	if err != nil {
		r.err = err
		return r
	}
	if err := cmd.Start(); err != nil {
		if sup != nil {
			sup.abort()
		}
		r.err = err
		return r
	}
	if sup != nil {
		sup.started()
	}
	prog.started()
	r.started = true
	r.pid = cmd.Process.Pid
	r.err = cmd.Wait()
	if sup != nil {
		st := sup.finish()
		r.sup = &st
		if st.toolPID > 0 {
			r.pid = st.toolPID
		}
	}
	// Whatever the leader did, nothing it started outlives the call.
	_ = killGroup(cmd.Process.Pid)
	r.stdout, r.stdoutCut = stdout.String(), stdout.cut
	r.stderr, r.stderrLen = stderr.Bytes(), stderr.total
	return r
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// runCommand executes an exec tool for [Harness.Execute].
func (h *Harness) runCommand(tctx context.Context, e *entry, args []byte, limit int) Result {
	r := e.tool.cmd.exec(tctx, args, limit)
	name := e.tool.Name
	if r.started && r.stderrLen > 0 {
		if h.cfg.LogStderr {
			s, _ := protocol.Truncate(string(r.stderr), maxLoggedStderr)
			h.cfg.Logger.Info().Str(logKeyTool, name).Int(logKeyPID, r.pid).
				Int64(logKeyStderrBytes, r.stderrLen).Str(logKeyStderr, s).Msg("tool stderr")
		} else {
			h.cfg.Logger.Debug().Str(logKeyTool, name).Int(logKeyPID, r.pid).
				Int64(logKeyStderrBytes, r.stderrLen).Msg("tool wrote to stderr (not logged: LogStderr is off)")
		}
	}

	if r.sup != nil && r.sup.escaped > 0 {
		h.escaped.Add(int64(r.sup.escaped))
		h.cfg.Logger.Warn().Str(logKeyTool, name).Int(logKeyPID, r.pid).Int("escaped", r.sup.escaped).
			Msg("exec tool left its process group (setsid or similar): those processes were found and killed")
	}
	var exitErr *exec.ExitError
	switch {
	case tctx.Err() != nil && r.started:
		return Result{Outcome: endOutcome(tctx)}
	case r.sup != nil && r.sup.startErr:
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: "harness.StartError"}
	case r.sup != nil && r.sup.ended && r.sup.code != 0:
		if r.sup.code < 0 {
			return Result{Outcome: protocol.OutcomeFailed, ErrorType: "signal: " + r.sup.signal.String()}
		}
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: fmt.Sprintf("exit status %d", r.sup.code)}
	case r.sup != nil && r.sup.ended && r.sup.escaped > 0:
		// Not a clean success: the tool did something behind its back.
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: "harness.EscapedProcessGroup"}
	case r.sup != nil && r.sup.ended:
		// exited 0 (the supervisor's own exit mirrors it)
	case r.err == nil, errors.Is(r.err, exec.ErrWaitDelay) && tctx.Err() == nil:
		// ErrWaitDelay alone: the command succeeded, but something it left
		// behind held stdout open; that something has been killed.
	case tctx.Err() != nil:
		return Result{Outcome: endOutcome(tctx)}
	case errors.As(r.err, &exitErr):
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: exitStatus(exitErr)}
	default:
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: fmt.Sprintf("%T", r.err)}
	}
	out, trunc := protocol.Truncate(r.stdout, limit)
	return Result{Outcome: protocol.OutcomeOK, Output: out, Truncated: trunc || r.stdoutCut}
}

// exitStatus renders how a process ended: "exit status N" or "signal: NAME".
func exitStatus(e *exec.ExitError) string {
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", e.ExitCode())
}

// boundedBuffer keeps the first max bytes written to it and counts and
// discards the rest, never refusing a write (so the writer never blocks or
// gets EPIPE because of the bound).
type boundedBuffer struct {
	mu    sync.Mutex
	max   int
	buf   bytes.Buffer
	total int64
	cut   bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	if room := b.max - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
			b.cut = true
		} else {
			b.buf.Write(p)
		}
	} else if len(p) > 0 {
		b.cut = true
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
