package client

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Catalog returns the fleet's tool catalog: the spec of every tool a
// worker serves, by name. Malformed entries are left out. It needs read
// access to the catalog bucket (the operator's or a coordinator's).
func (c *Client) Catalog(ctx context.Context) ([]protocol.ToolSpec, error) {
	specs, err := stores.ReadCatalog(ctx, c.js, c.subjects)
	if err != nil {
		return nil, fmt.Errorf("client: reading the catalog %s: %w", c.subjects.CatalogBucket(), err)
	}
	return specs, nil
}
