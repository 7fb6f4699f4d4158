package natsbus

import (
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// callsTunable are the calls stream's fields an operator may set: the
// clients' share, unless cfg sets it.
func callsTunable(cfg StreamConfig) []string { return shareTunable(cfg.MaxCallsPerClient) }

// shareTunable are the fields of a stream with a per-client share
// (max_msgs_per_subject) an operator may set: the share, unless set is.
func shareTunable(set int64) []string {
	if set > 0 {
		return nil
	}
	return []string{"max_msgs_per_subject"}
}

// Drift is [StreamDrift] of fs's expected configuration and got, less
// fs's tunable fields.
func (fs FleetStream) Drift(got jetstream.StreamConfig) []string {
	fields := StreamDrift(fs.Config, got)
	if len(fs.Tunable) == 0 {
		return fields
	}
	return slices.DeleteFunc(fields, func(f string) bool { return slices.Contains(fs.Tunable, f) })
}

// keepTunable is fs's expected configuration with got's values of its
// tunable fields.
func (fs FleetStream) keepTunable(got jetstream.StreamConfig) jetstream.StreamConfig {
	want := fs.Config
	if slices.Contains(fs.Tunable, "max_msgs_per_subject") && got.MaxMsgsPerSubject > 0 {
		want.MaxMsgsPerSubject = got.MaxMsgsPerSubject
	}
	return want
}
