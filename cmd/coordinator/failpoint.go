package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// crashAfterEnv names the fault-injection setting of "coordinator serve":
// KIND[:N] makes the process SIGKILL itself right after it journaled its
// N-th entry of KIND (default 1), e.g. "model", "dispatched:2",
// "finished"; "asking[:N]" as it asks the model for the N-th time, before
// anything since the last append is journaled (a round's observations,
// held for the response). The end-to-end tests use it to crash a
// coordinator at an exact step boundary; it is not meant for production.
const crashAfterEnv = "TOOLFLEET_CRASH_AFTER"

// crashAsking is the kind of $TOOLFLEET_CRASH_AFTER that crashes as the
// model is asked.
const crashAsking = "asking"

// crashPoint returns the kind and count of $TOOLFLEET_CRASH_AFTER ("" when
// unset).
func crashPoint() (kind string, n int64) {
	v := os.Getenv(crashAfterEnv)
	if v == "" {
		return "", 0
	}
	kind, nth, _ := strings.Cut(v, ":")
	i, err := strconv.Atoi(nth)
	if err != nil || i < 1 {
		i = 1
	}
	return kind, int64(i)
}

// crash SIGKILLs the process.
func crash() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns: the signal is on its way
}

// crashAfter returns the hook of $TOOLFLEET_CRASH_AFTER, or nil.
func crashAfter() func(loop.JournalEntry) {
	kind, n := crashPoint()
	if kind == "" || kind == crashAsking {
		return nil
	}
	var seen atomic.Int64
	return func(e loop.JournalEntry) {
		if e.Kind == kind && seen.Add(1) == n {
			crash()
		}
	}
}

// crashWhenAsked wraps newModel's model so that the process crashes as it
// is asked for the N-th time, when $TOOLFLEET_CRASH_AFTER is asking:N.
func crashWhenAsked(newModel func(zerolog.Logger) (loop.Model, error)) func(zerolog.Logger) (loop.Model, error) {
	kind, n := crashPoint()
	if kind != crashAsking {
		return newModel
	}
	return func(log zerolog.Logger) (loop.Model, error) {
		m, err := newModel(log)
		if err != nil {
			return nil, err
		}
		return &crashingModel{Model: m, at: n}, nil
	}
}

// crashingModel is a model whose at-th call crashes the process.
type crashingModel struct {
	loop.Model
	at    int64
	asked atomic.Int64
}

func (m *crashingModel) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	if m.asked.Add(1) == m.at {
		crash()
	}
	return m.Model.Complete(ctx, req)
}
