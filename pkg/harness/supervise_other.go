//go:build !linux

package harness

import (
	"os/exec"
	"syscall"
)

// supervision does nothing where there is no supervisor (see
// supervise_linux.go): the tool runs directly, its group is killed, and a
// process that leaves the group escapes (see Caveats).
type supervision struct{}

type supStatus struct {
	toolPID  int
	ended    bool
	code     int
	signal   syscall.Signal
	escaped  int
	startErr bool
}

func (c *command) supervised(*exec.Cmd) (*supervision, error) { return nil, nil }
func (s *supervision) started()                               {}
func (s *supervision) abort()                                 {}
func (s *supervision) finish() supStatus                      { return supStatus{} }
