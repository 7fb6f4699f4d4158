package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Catalog returns the fleet's tool catalog: the spec of every tool a
// worker serves, by name. Malformed entries are left out.
func (c *Client) Catalog(ctx context.Context) ([]protocol.ToolSpec, error) {
	kv, err := c.js.KeyValue(ctx, c.subjects.CatalogBucket())
	if err != nil {
		return nil, fmt.Errorf("client: bucket %s: %w", c.subjects.CatalogBucket(), err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: listing the catalog: %w", err)
	}
	var specs []protocol.ToolSpec
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed since listed
		}
		if err != nil {
			return nil, fmt.Errorf("client: reading tool %s: %w", key, err)
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
