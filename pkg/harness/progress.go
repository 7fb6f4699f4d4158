package harness

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Progress of a running call. A tool reports what it is doing while it
// runs; whoever waits for the call (a person at a terminal, a client of the
// run service, an MCP client) sees it. Progress never reaches the model's
// transcript, never extends the call's deadline, and a tool that reports
// too much loses reports, never time: the sink drops what it cannot pass on.
const (
	// MaxProgressBytes bounds one progress report; a longer one is cut
	// (at a rune boundary).
	MaxProgressBytes = protocol.MaxProgressBytes
	// EnvProgressFD names the variable that tells an exec tool which file
	// descriptor takes its progress reports, one line each. It is set only
	// when the call's progress goes somewhere.
	EnvProgressFD = "TOOLFLEET_PROGRESS_FD"
	// progressFD is the descriptor an exec tool writes its progress to.
	progressFD = 3
	// maxProgressLine bounds a line read from an exec tool's progress
	// descriptor; the rest of a longer line is read and discarded.
	maxProgressLine = 4 << 10
)

// ProgressFunc receives a running call's progress reports. It is called
// from the tool's goroutine (Go tools) or a reader of the tool's progress
// descriptor (exec tools), so it must be quick, must not block, and must
// be safe for concurrent use.
type ProgressFunc func(msg string)

type progressCtx struct{}

// WithProgress returns ctx under which a call's progress reports go to f:
// the worker installs it on the context it passes to [Harness.Execute].
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, progressCtx{}, f)
}

// ProgressFrom returns the sink of ctx, or nil.
func ProgressFrom(ctx context.Context) ProgressFunc {
	f, _ := ctx.Value(progressCtx{}).(ProgressFunc)
	return f
}

// ReportProgress reports a Go tool's progress: msg (cut to
// [MaxProgressBytes]) goes to whoever waits for the call, or nowhere when
// nobody does. It never blocks and never fails; reports past the fleet's
// rate are dropped.
func ReportProgress(ctx context.Context, msg string) {
	if f := ProgressFrom(ctx); f != nil {
		if msg = ClipProgress(msg); msg != "" {
			f(msg)
		}
	}
}

// ClipProgress trims msg and cuts it to [MaxProgressBytes] at a rune
// boundary; invalid UTF-8 becomes U+FFFD.
func ClipProgress(msg string) string {
	msg = strings.TrimSpace(strings.ToValidUTF8(msg, "\uFFFD"))
	if len(msg) <= MaxProgressBytes {
		return msg
	}
	cut := MaxProgressBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// readProgress reads an exec tool's progress lines from r until it ends,
// passing each non-empty one to f. It reads as fast as the tool writes, so
// the tool never blocks on its progress descriptor, whatever f drops.
func readProgress(r io.Reader, f ProgressFunc) {
	br := bufio.NewReaderSize(r, maxProgressLine)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// An over-long line: keep its start, discard the rest.
			if msg := ClipProgress(string(line)); msg != "" {
				f(msg)
			}
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return
			}
			continue
		}
		if msg := ClipProgress(string(line)); msg != "" {
			f(msg)
		}
		if err != nil {
			return
		}
	}
}

// execProgress is the worker's end of an exec tool's progress descriptor.
type execProgress struct {
	r, w *os.File
	done chan struct{}
	f    ProgressFunc
}

// progressPipe gives cmd a progress descriptor (fd 3, announced in
// [EnvProgressFD]) when ctx carries a sink, and nil otherwise. It must be
// called before cmd is rewritten to run under a supervisor.
func progressPipe(ctx context.Context, cmd *exec.Cmd) (*execProgress, error) {
	f := ProgressFrom(ctx)
	if f == nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	cmd.Env = append(cmd.Env, EnvProgressFD+"="+strconv.Itoa(progressFD))
	return &execProgress{r: r, w: w, f: f}, nil
}

// started closes the worker's copy of the write end and starts reading.
func (p *execProgress) started() {
	if p == nil {
		return
	}
	p.w.Close()
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		readProgress(p.r, p.f)
	}()
}

// progressDrain bounds how long a finished call's progress descriptor is
// read on: its last lines may still be in the pipe when the tool exits.
const progressDrain = 250 * time.Millisecond

// close stops reading once the call is over. The lines still in the pipe
// are read first (the tool's last report is often among them), until the
// tool's tree has closed its end or progressDrain passes: what a process
// that escaped the call still writes is not read.
func (p *execProgress) close() {
	if p == nil {
		return
	}
	p.w.Close()
	if p.done != nil {
		select {
		case <-p.done:
		case <-time.After(progressDrain):
		}
	}
	p.r.Close()
	if p.done != nil {
		<-p.done
	}
}
