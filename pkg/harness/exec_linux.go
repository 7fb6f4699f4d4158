package harness

import "syscall"

// diesWithWorker asks the kernel to SIGKILL the tool when the worker dies,
// even by SIGKILL: a tool must not outlive the worker that would answer for
// it, or a redelivered call runs twice at once.
func diesWithWorker(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
