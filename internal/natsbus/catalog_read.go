package natsbus

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ReadCatalog returns every well-formed entry of the tool catalog bucket,
// by name.
func ReadCatalog(ctx context.Context, js JetStream, subjects protocol.Subjects) ([]protocol.ToolSpec, error) {
	kv, err := js.KeyValue(ctx, subjects.CatalogBucket())
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var specs []protocol.ToolSpec
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed since listed
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
