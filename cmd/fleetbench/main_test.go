package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestShortRun runs the whole benchmark in its short mode, in-process: every
// phase must complete and print its row. It asserts nothing about timing.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a fleet")
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--short"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitOK, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"over TCP loopback",
		"cores, GOMAXPROCS",
		"baseline: core NATS request-reply",
		"baseline: JetStream round trip",
		"baseline: JetStream fan-out and gather, 32",
		"floor: 1 call, 256 B",
		"floor: 32 calls, 256 B, one async batch",
		"floor: sustained calls, 8 runs × 32-call rounds, 2 worker(s)",
		"floor with the fleet's checks: 32 echo calls",
		"floor with the fleet's checks: sustained echo calls, 8 runs × 32-call rounds, 2 worker(s)",
		"vs durable floor",
		"fleet: 1 echo call, dispatch only",
		"fleet: 1 echo call, full loop round",
		"fleet: open and close a run's inbox",
		"fleet: 32 echo calls, dispatch only",
		"fleet: 32 echo calls, full loop round",
		"fleet: 32 non-idempotent echo calls (claimed before they run), full loop round",
		"floor with the fleet's checks, claimed: 32 echo calls, each claimed by a start record before it runs",
		"(a claim on the floor with the fleet's checks: ",
		"fleet: 32 echo calls, full loop round, journaled (RunDurable)",
		"fleet: 32 echo calls, full loop round, 3 other coordinators reading the results stream",
		"full loop, 8 runs × 32-call rounds, 1 worker(s)",
		"dispatch only, 8 inboxes × 32-call rounds, 2 worker(s)",
		"full loop, 8 runs × 32-call rounds, 4 worker(s)",
		"full loop, 8 runs × 32-call rounds, 8 worker(s)",
		"workers' pulls:",
		"full loop, journaled runs (RunDurable), 8 runs × 32-call rounds, 2 worker(s)",
		"32 calls sleeping 20 ms, full loop round, 1 worker(s)",
		"32 calls sleeping 20 ms, full loop round, 4 worker(s)",
		"coordinator: 20 concurrent runs, busy",
		"coordinator: 20 concurrent runs, held",
		"per run",
		"fleet: 1 echo call, full loop round, journaled, sync always (an fsync per write)",
		"fleet: 32 echo calls, full loop round, sync always (an fsync per write)",
		"floor: 1 call, 256 B, sync always (an fsync per write)",
		"floor: 32 calls, 256 B, one async batch, sync always",
		"targets:",
		"8÷2 workers: the fleet's full loop",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The stored messages per call count every stream the server lists:
	// each call once in the calls stream, the journal's appends beside a
	// journaled round, the start records beside a non-idempotent one.
	for _, want := range []string{
		`1 echo call, full loop round, journaled \(RunDurable[^\n]*stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+, journal [0-9.]+\)`,
		`32 echo calls, full loop round, journaled \(RunDurable\), 1 worker: stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+, journal [0-9.]+\)`,
		`claimed before they run\), full loop round, 1 worker: [^\n]*stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+, starts [0-9.]+\)`,
		`1 echo call, full loop round, journaled, sync always \(an fsync per write\): stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+, journal [0-9.]+\)`,
		`32 echo calls, full loop round, journaled, sync always \(an fsync per write\): stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+, journal [0-9.]+\)`,
		`full loop, 8 runs × 32-call rounds, 2 worker\(s\): [^\n]*stored per call: [0-9.]+ \(calls 1\.00, results [0-9.]+\)`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks a note matching %q:\n%s", want, got)
		}
	}
}

// TestProfiles checks that the profile flags write both profiles of the
// 32-call round phase.
func TestProfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a fleet")
	}
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.out"), filepath.Join(dir, "mem.out")
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--short", "--only", "round", "--cpuprofile", cpu, "--memprofile", mem}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitOK, errOut.String())
	}
	for _, p := range []string{cpu, mem} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v (size %v), want a non-empty file", filepath.Base(p), err, st)
		}
	}
	if strings.Contains(out.String(), "baseline:") || !strings.Contains(out.String(), "fleet: 32 echo calls") {
		t.Errorf("--only round printed other phases or not its own:\n%s", out.String())
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"workers not a number", []string{"--workers", "1,x"}, "--workers"},
		{"workers zero", []string{"--workers", "0"}, "--workers"},
		{"unknown phase", []string{"--only", "nope"}, "--only"},
		{"duration too short", []string{"--duration", "1ms"}, "--duration"},
		{"negative runs", []string{"--runs", "-1"}, "--runs"},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"stray argument", []string{"extra"}, "unexpected argument"},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(t.Context(), tc.args, &out, &errOut); code != exitConfig {
				t.Fatalf("exit status %d, want %d", code, exitConfig)
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr = %q, want it to name %q", errOut.String(), tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
		})
	}
}

// TestShortClusterRun runs the replicated phase on a 3-node cluster in its
// short mode: the R3 rows are printed beside the R1 ones. No timing is
// asserted.
func TestShortClusterRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a fleet")
	}
	var out, errOut bytes.Buffer
	args := []string{"--short", "--only", "single,round", "--workers", "2", "--cluster", "3"}
	if code := run(t.Context(), args, &out, &errOut); code != exitOK {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitOK, errOut.String())
	}
	for _, want := range []string{
		"fleet: 1 echo call, full loop round (loop.Runner), 1 worker",
		"fleet: 1 echo call, full loop round, R3 on a 3-node cluster",
		"fleet: 32 echo calls, full loop round, R3 on a 3-node cluster",
		"2 workers, R3 on a 3-node cluster",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
