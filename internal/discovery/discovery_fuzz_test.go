package discovery

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
)

// FuzzParseWorkerInfo feeds arbitrary INFO answers to the discovery
// decoder: it never panics, and what it accepts is a worker of the fleet
// with a valid name and valid tool names, bounded strings and parsed
// flags.
func FuzzParseWorkerInfo(f *testing.F) {
	valid, _ := json.Marshal(micro.Info{
		ServiceIdentity: micro.ServiceIdentity{Name: workerbus.ServiceName, ID: "abc", Version: "0.1.0",
			Metadata: map[string]string{workerbus.MetaWorker: "w1", workerbus.MetaPrefix: "fleet", workerbus.MetaTools: "echo"}},
		Type: micro.InfoResponseType,
		Endpoints: []micro.EndpointInfo{{Name: "echo", Subject: "fleet.tool.echo", Metadata: map[string]string{
			workerbus.MetaSchemaDigest: "d1", workerbus.MetaTimeout: "5s", workerbus.MetaIdempotent: "true", workerbus.MetaRequiresApproval: "false"}}},
	})
	f.Add(valid)
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"type":"io.nats.micro.v1.info_response","name":"toolworker","id":"x","metadata":{"worker":"a b","prefix":"fleet"}}`))
	f.Add([]byte(`{"type":"io.nats.micro.v1.info_response","name":"toolworker","id":"x","metadata":{"worker":"w","prefix":"fleet"},"endpoints":[{"name":"a.b"},{"name":"ok","metadata":{"timeout":"-5s"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ok := parseWorkerInfo(data, "fleet")
		if !ok {
			return
		}
		if !workerNameRE.MatchString(w.Name) || w.ID == "" || len(w.ID) > 70 || len(w.Version) > 70 || len(w.Tools) > stores.MaxCatalogTools {
			t.Fatalf("accepted worker %+v", w)
		}
		for _, tool := range w.Tools {
			if !tool.Name.Valid() || len(tool.SchemaDigest) > 70 || tool.Timeout < 0 {
				t.Fatalf("accepted tool %+v", tool)
			}
		}
		_ = FindSchemaConflicts([]DiscoveredWorker{w, w}, map[string]string{})
	})
}
