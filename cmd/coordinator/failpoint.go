package main

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// crashAfterEnv names the fault-injection setting of "coordinator serve":
// KIND[:N] makes the process SIGKILL itself right after it journaled its
// N-th entry of KIND (default 1), e.g. "model", "dispatched:2",
// "finished". The end-to-end tests use it to crash a coordinator at an
// exact step boundary; it is not meant for production.
const crashAfterEnv = "TOOLFLEET_CRASH_AFTER"

// crashAfter returns the hook of $TOOLFLEET_CRASH_AFTER, or nil.
func crashAfter() func(loop.JournalEntry) {
	v := os.Getenv(crashAfterEnv)
	if v == "" {
		return nil
	}
	kind, nth, _ := strings.Cut(v, ":")
	n, err := strconv.Atoi(nth)
	if err != nil || n < 1 {
		n = 1
	}
	var seen atomic.Int64
	return func(e loop.JournalEntry) {
		if e.Kind == kind && seen.Add(1) == int64(n) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns: the signal is on its way
		}
	}
}
