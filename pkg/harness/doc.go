// Package harness is the worker-side sandbox that runs one tool call: it
// looks the tool up, validates the arguments against the tool's JSON Schema
// (draft 2020-12), runs the tool under the call's deadline, isolates panics,
// reduces errors to their type, bounds the output and logs what happened
// without values.
//
// It knows nothing of NATS or of the coordinator's loop: a [Call] goes in, a
// [Result] comes out, so it is tested with plain Go and reused by any
// transport.
//
// Tools are Go functions ([Func]), subprocesses described by a JSON manifest
// ([ParseManifest], [LoadManifest]) or the built-in [Calculator] and [Echo].
//
// # Invariants
//
//   - Arguments are validated before anything runs. Invalid arguments yield
//     outcome invalid_arguments with the validator's message; the tool does
//     not run.
//   - [Harness.Execute] never panics and returns by the call's deadline (plus
//     a few milliseconds), whatever the tool does (see Caveats for exec tools
//     that leave the process group).
//   - A failure is reported by its type only: a returned error as its Go type
//     (fmt "%T"), a panic as "panic: <type of the value>", an exec tool as
//     "exit status N". Error messages, panic values, stack traces, argument
//     values, outputs and stderr never reach a [Result]'s ErrorType or the log.
//   - Output is truncated rune-safely to the call's bound with
//     [protocol.TruncationMarker], and [Result].Truncated says so.
//   - Exec tools get argv exec (no shell, nothing of the model's in argv), the
//     arguments on stdin, a clean environment (PATH plus the manifest's env),
//     their own process group, which is killed with SIGKILL at the deadline or
//     on cancel, and a stdout read only up to a byte bound.
//
// # Caveats
//
// Go cannot stop a goroutine. When a Go tool's deadline passes or its call is
// cancelled, Execute stops waiting, answers timeout or cancelled and cancels
// the tool's context; a tool that ignores its context keeps running. Such
// goroutines are counted ([Harness.Abandoned]) until they return. When the
// count reaches [Config].MaxAbandoned, new calls of Go tools are refused with
// outcome failed and ErrorType "harness.Overloaded" (exec tools still run:
// they can be killed). The count can briefly exceed the bound by the number of
// calls already running when it was reached, so the leak is bounded by
// MaxAbandoned plus the caller's concurrency. Go tools that do blocking work
// must honour ctx; put anything that cannot into an exec tool.
//
// A Go tool runs on a goroutine of its own, which the harness keeps for
// later calls (its stack has grown once, not on every call) unless the
// tool panicked, called runtime.Goexit or was abandoned. What a tool
// leaves on its goroutine stays for the next calls: a tool that locks its
// OS thread (runtime.LockOSThread) must unlock it before it returns, and
// one that changes the thread's state (namespaces, credentials) belongs in
// an exec tool.
//
// On Linux an exec tool runs under a supervisor: the worker's own binary,
// re-executed, which is a child subreaper, so every process the tool starts
// stays in its subtree even after setsid or a double fork. When the tool
// exits, at its deadline, on cancel, and when the worker dies (even by
// SIGKILL: the supervisor's parent-death signal), the supervisor kills the
// tool's process group and every process left in its subtree. Processes
// that had left the tool's group are counted ([Harness.Escaped]) and the
// call ends failed ("harness.EscapedProcessGroup"), never as a clean
// success. The parent-death signal is tied to the OS thread that started
// the supervisor, which the Go runtime keeps for the life of the process
// unless a goroutine exits while locked to it (runtime.LockOSThread). A
// tool running as the worker's own user can kill its supervisor, and then
// what it left outside its group survives: give such tools a "user" of
// their own. Elsewhere there is no supervisor: the tool's group is killed,
// a process that left it escapes, and a tool may outlive a worker killed
// with SIGKILL.
//
// A manifest's "limits" (rlimits) and "user"/"group" are applied by a
// launcher stage between fork and the tool's program, so they hold from
// its first instruction; a user other than the worker's own needs a worker
// running as root.
//
// An exec tool runs in the worker's working directory, as the worker's user
// unless its manifest names another: the harness bounds time, output,
// environment and, with "limits", memory, CPU, processes and files, not
// file system or network access. Use OS isolation (containers, seccomp,
// users) for that.
//
// Memory is bounded for exec tools (stdout and stderr are read up to a bound
// and the rest is discarded), but not for Go tools: a Go tool's output string
// is already in memory when it returns and is truncated afterwards.
package harness
