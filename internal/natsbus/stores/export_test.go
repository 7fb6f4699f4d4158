package stores

import (
	"context"
)

// OnLeader reads agent name's revision rev (0: its newest) from the
// agents bucket's leader, as a get's "not found" is confirmed.
func (a *AgentStore) OnLeader(ctx context.Context, name string, rev uint64) ([]byte, uint64, error) {
	return a.onLeader(ctx, name, rev)
}
