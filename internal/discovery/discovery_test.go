package discovery_test

import (
	"reflect"
	"testing"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestFindSchemaConflicts(t *testing.T) {
	worker := func(name string, tools ...discovery.DiscoveredTool) discovery.DiscoveredWorker {
		return discovery.DiscoveredWorker{ID: name + "-id", Name: name, Tools: tools}
	}
	tool := func(name protocol.ToolName, digest string) discovery.DiscoveredTool {
		return discovery.DiscoveredTool{Name: name, SchemaDigest: digest}
	}
	tests := []struct {
		name    string
		workers []discovery.DiscoveredWorker
		catalog map[string]string
		want    []discovery.SchemaConflict
	}{
		{"agreement", []discovery.DiscoveredWorker{worker("a", tool("echo", "d1")), worker("b", tool("echo", "d1"))},
			map[string]string{"echo": "d1"}, nil},
		{"no workers", nil, map[string]string{"echo": "d1"}, nil},
		{"tool not in the catalog yet", []discovery.DiscoveredWorker{worker("a", tool("echo", "d1"))}, nil, nil},
		{"two workers disagree", []discovery.DiscoveredWorker{
			worker("b", tool("echo", "d2"), tool("calc", "c1")),
			worker("a", tool("echo", "d1"), tool("calc", "c1")),
			worker("c", tool("echo", "d1")),
		}, map[string]string{"echo": "d2", "calc": "c1"}, []discovery.SchemaConflict{{
			Tool: "echo", CatalogDigest: "d2",
			Digests: []discovery.DigestWorkers{{Digest: "d1", Workers: []string{"a", "c"}}, {Digest: "d2", Workers: []string{"b"}}},
		}}},
		{"every live worker disagrees with the catalog", []discovery.DiscoveredWorker{worker("a", tool("echo", "d1"))},
			map[string]string{"echo": "d9"}, []discovery.SchemaConflict{{
				Tool: "echo", CatalogDigest: "d9", Digests: []discovery.DigestWorkers{{Digest: "d1", Workers: []string{"a"}}},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := discovery.FindSchemaConflicts(tt.workers, tt.catalog)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("conflicts = %+v, want %+v", got, tt.want)
			}
		})
	}
}
