//go:build !linux

package mcptool

import "syscall"

// diesWithWorker does nothing where the kernel has no parent-death signal.
func diesWithWorker(*syscall.SysProcAttr) {}
