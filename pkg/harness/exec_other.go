//go:build !linux

package harness

import "syscall"

// diesWithWorker does nothing where the kernel has no parent-death signal:
// a tool may outlive a worker killed with SIGKILL (see Caveats).
func diesWithWorker(*syscall.SysProcAttr) {}
