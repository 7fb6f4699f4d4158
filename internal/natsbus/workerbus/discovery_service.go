package workerbus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ServiceName is the name of the NATS micro service every worker registers:
// "nats micro ls" and "nats micro info toolworker" show the fleet's
// workers, and coordinators find them on $SRV.INFO.toolworker.
const ServiceName = "toolworker"

// DefaultServiceVersion is the service version a worker announces when
// WorkerConfig.Version is empty.
const DefaultServiceVersion = "0.1.0"

// Metadata keys of a worker's micro service (MetaWorker, MetaPrefix,
// MetaTools, MetaConcurrency) and of its per-tool endpoints (the others).
const (
	MetaWorker           = "worker"
	MetaPrefix           = "prefix"
	MetaTools            = "tools"
	MetaConcurrency      = "concurrency"
	MetaCallSubject      = "call_subject"
	MetaDescription      = "description"
	MetaSchema           = "schema"
	MetaSchemaDigest     = "schema_digest"
	MetaSchemaOmitted    = "schema_omitted"
	MetaTimeout          = "timeout"
	MetaIdempotent       = "idempotent"
	MetaRequiresApproval = "requires_approval"
)

// Headers of a tool-info answer.
const (
	// HeaderWorker names the worker that answered.
	HeaderWorker = "Fleet-Worker"
	// HeaderCallSubject names the JetStream subject the tool's calls go to.
	HeaderCallSubject = "Fleet-Call-Subject"
)

// Bounds on what a worker's INFO answer carries, so that it stays well
// under NATS's max_payload whatever the manifest holds.
const (
	// maxSchemaMeta bounds one tool's schema in its endpoint metadata.
	maxSchemaMeta = 32 << 10
	// maxSchemasMeta bounds the schemas of all tools together.
	maxSchemasMeta = 256 << 10
	// maxDescriptionMeta bounds a description in metadata, in runes.
	maxDescriptionMeta = 200
	// maxToolsMeta bounds the tool list in the service metadata, in bytes.
	maxToolsMeta = 2048
)

// semverRE is the version rule of NATS micro services.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// prefixOf is the subject prefix s uses.
func prefixOf(s protocol.Subjects) string {
	if s.Prefix == "" {
		return protocol.DefaultPrefix
	}
	return s.Prefix
}

// serviceConfig describes w as a micro service: its identity, its tools
// and, per endpoint, the tool's real call counts (StatsHandler).
func (w *Worker) serviceConfig() micro.Config {
	names := make([]string, len(w.tools))
	for i, tc := range w.tools {
		names[i] = string(tc.name)
	}
	return micro.Config{
		Name:    ServiceName,
		Version: w.cfg.Version,
		Description: clipRunes(fmt.Sprintf("toolfleet worker %s (%s): %s", w.cfg.Name, prefixOf(w.subjects),
			strings.Join(names, ", ")), maxDescriptionMeta),
		Metadata: map[string]string{
			MetaWorker:      w.cfg.Name,
			MetaPrefix:      prefixOf(w.subjects),
			MetaTools:       joinClipped(names, maxToolsMeta),
			MetaConcurrency: strconv.Itoa(w.cfg.Concurrency),
		},
		// Every worker answers a tool-info request, so a request that
		// gathers all replies sees every worker's schema.
		QueueGroupDisabled: true,
		StatsHandler: func(e *micro.Endpoint) any {
			if st, ok := w.ToolStats(protocol.ToolName(e.Name)); ok {
				return st
			}
			return nil
		},
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			w.limited.Warn().Str(natsbus.LogSubject, err.Subject).Msg("discovery service error")
		},
	}
}

// startService registers w's micro service with one endpoint per tool on
// the tool-info subject. Calls never travel there: the endpoint answers
// with the worker's spec of the tool.
func (w *Worker) startService() (micro.Service, error) {
	svc, err := micro.AddService(w.nc, w.serviceConfig())
	if err != nil {
		return nil, fmt.Errorf("natsbus: registering the %s service: %w", ServiceName, err)
	}
	budget := maxSchemasMeta
	for _, tc := range w.tools {
		subject, err := w.subjects.ToolInfo(tc.name)
		if err == nil {
			err = svc.AddEndpoint(string(tc.name), w.toolInfoHandler(tc),
				micro.WithEndpointSubject(subject),
				micro.WithEndpointMetadata(endpointMetadata(tc, &budget)))
		}
		if err != nil {
			svc.Stop()
			return nil, fmt.Errorf("natsbus: tool-info endpoint of %q: %w", tc.name, err)
		}
	}
	return svc, nil
}

// toolInfoHandler answers a request on a tool-info subject with the
// worker's spec of the tool. The request's body is ignored.
func (w *Worker) toolInfoHandler(tc *toolConsumer) micro.Handler {
	body, err := protocol.Encode(&tc.spec)
	return micro.HandlerFunc(func(req micro.Request) {
		if err != nil {
			req.Error("500", "spec unavailable", nil)
			return
		}
		h := nats.Header{}
		h.Set(HeaderWorker, w.cfg.Name)
		h.Set(HeaderCallSubject, tc.subject)
		req.Respond(body, micro.WithHeaders(micro.Headers(h)))
	})
}

// endpointMetadata describes one tool: its schema (while *budget lasts),
// digest, timeout and flags, and where its calls go.
func endpointMetadata(tc *toolConsumer, budget *int) map[string]string {
	s := tc.spec
	md := map[string]string{
		MetaCallSubject:      tc.subject,
		MetaSchemaDigest:     s.SchemaDigest,
		MetaIdempotent:       strconv.FormatBool(s.Idempotent),
		MetaRequiresApproval: strconv.FormatBool(s.RequiresApproval),
		MetaTimeout:          "default",
	}
	if s.TimeoutMS > 0 {
		md[MetaTimeout] = s.Timeout().String()
	}
	if s.Description != "" {
		md[MetaDescription] = clipRunes(s.Description, maxDescriptionMeta)
	}
	schema := compactJSON(s.Parameters)
	switch {
	case len(schema) > maxSchemaMeta:
		md[MetaSchemaOmitted] = "too large; see the catalog bucket"
	case len(schema) > *budget:
		md[MetaSchemaOmitted] = "the worker's schemas are too large together; see the catalog bucket"
	default:
		md[MetaSchema] = schema
		*budget -= len(schema)
	}
	return md
}

// compactJSON returns raw without insignificant whitespace (raw is valid
// JSON: the harness compiled it).
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// clipRunes bounds s to n runes, marking a cut with "…".
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// joinClipped joins names with commas, stopping before max bytes with a
// count of the names left out.
func joinClipped(names []string, max int) string {
	var b strings.Builder
	for i, n := range names {
		if b.Len()+len(n)+1 > max-16 {
			fmt.Fprintf(&b, ",…(+%d)", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
	}
	return b.String()
}

// startDiscovery starts the worker's discovery service unless NoDiscovery is
// set. A worker that cannot register still serves calls: discovery is for
// operators and coordinators' conflict checks, not for the calls
// themselves. It returns nil when no service runs.
func (w *Worker) startDiscovery() micro.Service {
	if w.cfg.NoDiscovery {
		return nil
	}
	svc, err := w.startService()
	if err != nil {
		w.log.Warn().Err(err).Msg("not discoverable: serving calls without the discovery service")
		return nil
	}
	return svc
}
