//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ptyRun runs cmd with its stdin, stdout and stderr on a new
// pseudo-terminal, as a person at a terminal runs it, and returns what it
// wrote there once it exits (or stdout, when cmd.Stdout is set, goes
// elsewhere). It skips the test when the system has no pseudo-terminals.
func ptyRun(t *testing.T, cmd *exec.Cmd) ([]byte, error) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("naming the pseudo-terminal: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 160}); err != nil {
		t.Logf("window size: %v", err)
	}
	cmd.Stdin = slave
	if cmd.Stdout == nil {
		cmd.Stdout = slave
	}
	if cmd.Stderr == nil {
		cmd.Stderr = slave
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	var out bytes.Buffer
	var wg sync.WaitGroup
	if err := cmd.Start(); err != nil {
		slave.Close()
		return nil, err
	}
	slave.Close() // the child holds it; the reader sees EIO once it exits
	wg.Go(func() { _, _ = io.Copy(&out, master) })
	err = cmd.Wait()
	wg.Wait()
	return out.Bytes(), err
}
