package mcptool

import "syscall"

// diesWithWorker asks the kernel to SIGKILL the server when the worker dies.
func diesWithWorker(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
