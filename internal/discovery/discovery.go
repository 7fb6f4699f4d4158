package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [DiscoverConfig].
const (
	DefaultDiscoverWait  = time.Second
	DefaultDiscoverQuiet = 250 * time.Millisecond
	DefaultMaxDiscovered = 10_000
	// maxDiscoveredTools bounds the tools kept from all answers together,
	// so a flood of forged answers cannot exhaust memory.
	maxDiscoveredTools = 1 << 16
)

// DiscoverConfig bounds one [Discover]. The zero value means the defaults.
type DiscoverConfig struct {
	// Wait bounds how long answers are gathered. Default: 1s.
	Wait time.Duration
	// Quiet ends the gathering early once no answer has arrived for this
	// long after the last one. Default: 250ms.
	Quiet time.Duration
	// MaxWorkers bounds the answers kept; further ones are ignored.
	// Default: 10,000.
	MaxWorkers int
}

func (c DiscoverConfig) withDefaults() DiscoverConfig {
	if c.Wait <= 0 {
		c.Wait = DefaultDiscoverWait
	}
	if c.Quiet <= 0 {
		c.Quiet = DefaultDiscoverQuiet
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = DefaultMaxDiscovered
	}
	return c
}

// DiscoveredWorker is one live worker of the fleet, as its discovery
// service describes itself. Every field comes from the network: treat it as
// untrusted text.
type DiscoveredWorker struct {
	// ID is the service instance's id ("nats micro info toolworker ID").
	ID string
	// Name is the worker's name (WorkerConfig.Name).
	Name    string
	Version string
	// Tools lists the tools the worker serves, in its own order.
	Tools []DiscoveredTool
}

// DiscoveredTool is one tool a discovered worker serves.
type DiscoveredTool struct {
	Name         protocol.ToolName
	SchemaDigest string
	// Timeout is the tool's own timeout, 0 for the fleet default.
	Timeout          time.Duration
	Idempotent       bool
	RequiresApproval bool
}

// Discover asks every live worker of the fleet named by s for its
// description ($SRV.INFO.toolworker) and returns the answers that arrive
// within cfg's bounds, sorted by worker name. Answers from another fleet
// (another prefix), from other services and malformed ones are skipped. No
// worker at all is not an error.
func Discover(ctx context.Context, nc *nats.Conn, s protocol.Subjects, cfg DiscoverConfig) ([]DiscoveredWorker, error) {
	cfg = cfg.withDefaults()
	subject, err := micro.ControlSubject(micro.InfoVerb, workerbus.ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	msgs := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return nil, fmt.Errorf("discovery: discovery: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("discovery: discovery: %w", err)
	}
	prefix := prefixOf(s)
	deadline := time.NewTimer(cfg.Wait)
	defer deadline.Stop()
	var quiet <-chan time.Time
	var out []DiscoveredWorker
	tools := 0
	for len(out) < cfg.MaxWorkers && tools < maxDiscoveredTools {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-deadline.C:
			sortWorkers(out)
			return out, nil
		case <-quiet:
			sortWorkers(out)
			return out, nil
		case m := <-msgs:
			if m.Header.Get("Status") == "503" { // no responders: no worker at all
				return nil, nil
			}
			if w, ok := parseWorkerInfo(m.Data, prefix); ok {
				out = append(out, w)
				tools += len(w.Tools)
			}
			quiet = time.After(cfg.Quiet)
		}
	}
	sortWorkers(out)
	return out, nil
}

func sortWorkers(ws []DiscoveredWorker) {
	slices.SortFunc(ws, func(a, b DiscoveredWorker) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// parseWorkerInfo decodes one INFO answer of a worker of the fleet with
// the given prefix.
func parseWorkerInfo(data []byte, prefix string) (DiscoveredWorker, bool) {
	var info micro.Info
	if err := json.Unmarshal(data, &info); err != nil {
		return DiscoveredWorker{}, false
	}
	if info.Type != micro.InfoResponseType || info.Name != workerbus.ServiceName || info.Metadata[workerbus.MetaPrefix] != prefix {
		return DiscoveredWorker{}, false
	}
	name := info.Metadata[workerbus.MetaWorker]
	if !workerNameRE.MatchString(name) || info.ID == "" {
		return DiscoveredWorker{}, false
	}
	w := DiscoveredWorker{ID: clipKey(info.ID), Name: name, Version: clipKey(info.Version)}
	for _, e := range info.Endpoints {
		if len(w.Tools) == stores.MaxCatalogTools {
			break
		}
		tool, err := protocol.ParseToolName(e.Name)
		if err != nil {
			continue
		}
		t := DiscoveredTool{
			Name:             tool,
			SchemaDigest:     clipKey(e.Metadata[workerbus.MetaSchemaDigest]),
			Idempotent:       e.Metadata[workerbus.MetaIdempotent] == "true",
			RequiresApproval: e.Metadata[workerbus.MetaRequiresApproval] == "true",
		}
		if d, err := time.ParseDuration(e.Metadata[workerbus.MetaTimeout]); err == nil && d > 0 {
			t.Timeout = d
		}
		w.Tools = append(w.Tools, t)
	}
	return w, true
}

// SchemaConflict is a tool on whose schema the fleet disagrees: live
// workers serve it with different schemas, or every live worker serves a
// schema other than the catalog's.
type SchemaConflict struct {
	Tool protocol.ToolName
	// CatalogDigest is the catalog's schema digest of the tool; empty when
	// the catalog does not list it.
	CatalogDigest string
	// Digests lists each schema digest live workers serve and who serves
	// it, sorted by digest.
	Digests []DigestWorkers
}

// DigestWorkers is one schema digest of a tool and the workers serving it,
// sorted.
type DigestWorkers struct {
	Digest  string
	Workers []string
}

// String describes the conflict in one line: the tool, the catalog's
// digest and each digest with its workers.
func (c SchemaConflict) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: catalog %s;", c.Tool, orNone(c.CatalogDigest))
	for _, d := range c.Digests {
		fmt.Fprintf(&b, " %s served by %s;", d.Digest, strings.Join(d.Workers, ","))
	}
	return strings.TrimSuffix(b.String(), ";")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// FindSchemaConflicts returns the tools on whose schema workers disagree,
// with each other or (all of them) with catalog, a map of tool name to the
// catalog's schema digest. The result is sorted by tool.
func FindSchemaConflicts(workers []DiscoveredWorker, catalog map[string]string) []SchemaConflict {
	served := map[protocol.ToolName]map[string][]string{} // tool → digest → workers
	for _, w := range workers {
		for _, t := range w.Tools {
			if served[t.Name] == nil {
				served[t.Name] = map[string][]string{}
			}
			served[t.Name][t.SchemaDigest] = append(served[t.Name][t.SchemaDigest], w.Name)
		}
	}
	var out []SchemaConflict
	for tool, digests := range served {
		cat, listed := catalog[string(tool)]
		_, catalogServed := digests[cat]
		if len(digests) < 2 && (!listed || catalogServed) {
			continue
		}
		c := SchemaConflict{Tool: tool, CatalogDigest: cat}
		for d, ws := range digests {
			slices.Sort(ws)
			c.Digests = append(c.Digests, DigestWorkers{Digest: d, Workers: slices.Compact(ws)})
		}
		slices.SortFunc(c.Digests, func(a, b DigestWorkers) int { return strings.Compare(a.Digest, b.Digest) })
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b SchemaConflict) int { return strings.Compare(string(a.Tool), string(b.Tool)) })
	return out
}

// signature identifies a conflict's state — the catalog's digest and the
// digests served — to tell a new or changed conflict from one already
// reported. Workers coming and going with the same schemas do not change
// it.
func (c SchemaConflict) signature() string {
	var b strings.Builder
	b.WriteString(c.CatalogDigest)
	for _, d := range c.Digests {
		b.WriteString("|" + d.Digest)
	}
	return b.String()
}
