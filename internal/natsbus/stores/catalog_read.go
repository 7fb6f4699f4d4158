package stores

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ReadCatalog returns every well-formed entry of the tool catalog bucket,
// by name. It creates no consumer: the keys are the stream's subjects (its
// information), each entry a single get.
func ReadCatalog(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects) ([]protocol.ToolSpec, error) {
	kv, err := js.KeyValue(ctx, subjects.CatalogBucket())
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + subjects.CatalogBucket() + "."
	subjs, err := natsbus.StreamSubjects(ctx, js, "KV_"+subjects.CatalogBucket(), prefix+">")
	if err != nil {
		return nil, err
	}
	var specs []protocol.ToolSpec
	for subj := range subjs {
		key := strings.TrimPrefix(subj, prefix)
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // removed (since listed)
		}
		if err != nil {
			return nil, err
		}
		spec, err := protocol.DecodeToolSpec(e.Value(), 0)
		if err != nil || string(spec.Name) != key {
			continue
		}
		specs = append(specs, spec)
	}
	slices.SortFunc(specs, func(a, b protocol.ToolSpec) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return specs, nil
}
