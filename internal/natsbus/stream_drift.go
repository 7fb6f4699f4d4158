package natsbus

import (
	"reflect"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamDrift returns the fields, by their JetStream (JSON) names, in
// which got differs from want, after the server's defaults are applied to
// both. Every field that decides what a stream stores, keeps, copies or
// re-publishes is compared — subjects, retention, limits, the duplicate
// window, the deny flags, sources, mirror, republish, subject transform,
// direct get, message TTLs, counters, schedules, batches — all but the
// name, description, metadata, placement and first sequence. Replicas
// differ only when got has fewer than want.
func StreamDrift(want, got jetstream.StreamConfig) []string {
	w, g := normalized(want), normalized(got)
	var fields []string
	diff := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			fields = append(fields, name)
		}
	}
	diff("subjects", w.Subjects, g.Subjects)
	diff("retention", w.Retention, g.Retention)
	diff("max_consumers", w.MaxConsumers, g.MaxConsumers)
	diff("max_msgs", w.MaxMsgs, g.MaxMsgs)
	diff("max_bytes", w.MaxBytes, g.MaxBytes)
	diff("discard", w.Discard, g.Discard)
	diff("discard_new_per_subject", w.DiscardNewPerSubject, g.DiscardNewPerSubject)
	diff("max_age", w.MaxAge, g.MaxAge)
	diff("max_msgs_per_subject", w.MaxMsgsPerSubject, g.MaxMsgsPerSubject)
	diff("max_msg_size", w.MaxMsgSize, g.MaxMsgSize)
	diff("storage", w.Storage, g.Storage)
	// Replicas are a floor: an operator may provision more copies than a
	// process was configured to expect (R3 on a cluster), never fewer.
	if g.Replicas < w.Replicas {
		fields = append(fields, "num_replicas")
	}
	diff("no_ack", w.NoAck, g.NoAck)
	diff("duplicate_window", w.Duplicates, g.Duplicates)
	diff("mirror", w.Mirror, g.Mirror)
	diff("sources", w.Sources, g.Sources)
	diff("sealed", w.Sealed, g.Sealed)
	diff("deny_delete", w.DenyDelete, g.DenyDelete)
	diff("deny_purge", w.DenyPurge, g.DenyPurge)
	diff("allow_rollup_hdrs", w.AllowRollup, g.AllowRollup)
	diff("compression", w.Compression, g.Compression)
	diff("subject_transform", w.SubjectTransform, g.SubjectTransform)
	diff("republish", w.RePublish, g.RePublish)
	diff("allow_direct", w.AllowDirect, g.AllowDirect)
	diff("mirror_direct", w.MirrorDirect, g.MirrorDirect)
	diff("consumer_limits", w.ConsumerLimits, g.ConsumerLimits)
	diff("allow_msg_ttl", w.AllowMsgTTL, g.AllowMsgTTL)
	diff("subject_delete_marker_ttl", w.SubjectDeleteMarkerTTL, g.SubjectDeleteMarkerTTL)
	diff("allow_msg_counter", w.AllowMsgCounter, g.AllowMsgCounter)
	diff("allow_atomic", w.AllowAtomicPublish, g.AllowAtomicPublish)
	diff("allow_msg_schedules", w.AllowMsgSchedules, g.AllowMsgSchedules)
	diff("allow_batched", w.AllowBatchPublish, g.AllowBatchPublish)
	diff("persist_mode", w.PersistMode, g.PersistMode)
	return fields
}

// normalized applies the server's defaults to the fields StreamDrift
// compares, so that an unset field and the server's value for it agree.
func normalized(c jetstream.StreamConfig) jetstream.StreamConfig {
	c.Subjects = slices.Clone(c.Subjects)
	slices.Sort(c.Subjects)
	if len(c.Subjects) == 0 {
		c.Subjects = nil
	}
	if len(c.Sources) == 0 {
		c.Sources = nil
	}
	for _, p := range []*int64{&c.MaxMsgs, &c.MaxBytes, &c.MaxMsgsPerSubject} {
		if *p == 0 {
			*p = -1
		}
	}
	if c.MaxConsumers == 0 {
		c.MaxConsumers = -1
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = -1
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 && c.Mirror == nil {
		c.Duplicates = 2 * time.Minute
		if c.MaxAge > 0 && c.MaxAge < c.Duplicates {
			c.Duplicates = c.MaxAge
		}
	}
	return c
}

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
