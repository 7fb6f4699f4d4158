package mcptool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxStderrLine bounds one logged stderr line of a server.
const maxStderrLine = 2000

// process is one running stdio server: its own process group, killed as a
// whole.
type process struct {
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed once the leader is reaped
	mu     sync.Mutex
	status string // how it ended, once exited
}

// startProcess starts the server and returns it with the transport that
// speaks to it over its stdin and stdout.
func (s *Server) startProcess() (*process, mcp.Transport, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, err
	}
	cmd := &exec.Cmd{
		Path:   s.cfg.Path,
		Args:   append([]string(nil), s.cfg.Command...),
		Env:    append(make([]string, 0, len(s.cfg.Env)), s.cfg.Env...), // never nil: nil inherits the worker's
		Dir:    s.cfg.Dir,
		Stdin:  inR,
		Stdout: outW,
	}
	var errR *os.File
	if s.cfg.LogStderr {
		var errW *os.File
		if errR, errW, err = os.Pipe(); err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			return nil, nil, err
		}
		cmd.Stderr = errW
		defer errW.Close()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	diesWithWorker(cmd.SysProcAttr)
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		// The error names the program, never the environment.
		return nil, nil, fmt.Errorf("starting %s: %w", s.cfg.Path, errors.Unwrap(err))
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	if errR != nil {
		go s.logStderr(errR, p.pid)
	}
	go func() {
		werr := cmd.Wait()
		// Whatever the leader did, nothing it started outlives it.
		_ = killGroup(p.pid)
		p.mu.Lock()
		p.status = describeExit(werr)
		p.mu.Unlock()
		close(p.exited)
	}()
	t := &mcp.IOTransport{Reader: outR, Writer: inW, MaxLineLength: s.cfg.MaxMessageBytes}
	return p, t, nil
}

// kill kills the server's process group.
func (p *process) kill() { _ = killGroup(p.pid) }

func (p *process) exitStatus() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

func describeExit(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal: " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	return fmt.Sprintf("%T", err)
}

// logStderr logs the server's stderr line by line, redacted and bounded.
func (s *Server) logStderr(r io.ReadCloser, pid int) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := string(line)
			if len(text) > maxStderrLine {
				text = text[:maxStderrLine]
			}
			s.log.Info().Int("pid", pid).Str("stderr", s.secrets.redact(text)).Msg("mcp server stderr")
		}
		if err == bufio.ErrBufferFull {
			// The rest of an overlong line is dropped.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
