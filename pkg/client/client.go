package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// DefaultClient is the client name of a [Config] that names none and
// whose connection has no user name that is a valid subject token.
const DefaultClient = "default"

// Config configures a [Client]. Its zero value means the defaults.
type Config struct {
	// Prefix is the fleet's subject prefix. Default: "fleet".
	Prefix string
	// Client is the client's name: the <client> token of its submit
	// subjects and of its result keys, which a deployment lets only this
	// client use (deploy/nats-server.conf). Default: the connection's user
	// name when it is a valid token, else "default".
	Client string
	// Domain is the JetStream domain of the fleet's streams. Default: none.
	Domain string
	// AttemptTimeout bounds one attempt to store a submission; Submit
	// retries until its context ends. Default: 2s.
	AttemptTimeout time.Duration
}

// ConfigError names a [Config] field (or "Conn") whose value cannot work.
// It is a [config.Error].
type ConfigError = config.FieldError

// Client submits runs to a serving fleet and reads their results. It is
// safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	js       natsbus.JetStream
	subjects protocol.Subjects
	name     string
	domain   string
	attempt  time.Duration
}

// New returns a Client over nc. A bad configuration (a nil connection, a
// prefix, client name or domain that is not a subject token) is a
// [config.Error] naming the field, returned before anything is sent.
func New(nc *nats.Conn, cfg Config) (*Client, error) {
	if nc == nil {
		return nil, config.Errorf("Conn", "must not be nil")
	}
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, config.Errorf("Prefix", "must match %s, got %q", protocol.TokenPattern, cfg.Prefix)
	}
	name := cfg.Client
	if name == "" {
		name = DefaultClient
		if user := nc.Opts.User; protocol.ValidToken(user) {
			name = user
		}
	}
	switch {
	case !protocol.ValidToken(name):
		return nil, config.Errorf("Client", "must match %s, got %q", protocol.TokenPattern, name)
	case cfg.Domain != "" && !protocol.ValidToken(cfg.Domain):
		return nil, config.Errorf("Domain", "must match %s, got %q", protocol.TokenPattern, cfg.Domain)
	case cfg.AttemptTimeout < 0:
		return nil, config.Errorf("AttemptTimeout", "must be >= 0, got %v", cfg.AttemptTimeout)
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = 2 * time.Second
	}
	js, err := natsbus.NewJetStream(nc, cfg.Domain)
	if err != nil {
		return nil, config.Errorf("Domain", "%v", err)
	}
	return &Client{nc: nc, js: js, subjects: subjects, name: name, domain: cfg.Domain, attempt: cfg.AttemptTimeout}, nil
}

// Name returns the client's name: the <client> token of its subjects.
func (c *Client) Name() string { return c.name }

// Run names one submitted run and where its result will be.
type Run struct {
	// ID is the run's id, derived from the client and the submission id
	// ([protocol.SubmissionRunID]).
	ID protocol.RunID
	// Submission is the submission id; submitting it again never creates
	// a second run.
	Submission string
	// Agent is the agent the run was submitted to.
	Agent string
	// Key is the result's key in the runs bucket: <client>.<run>.
	Key string
	// Subject is where the result is announced (core NATS).
	Subject string
	// Duplicate is true when the server already held this submission
	// (a retry within the stream's duplicate window).
	Duplicate bool
}

// RunOf returns the Run of submission id on agent ("" for the default) of
// this client, as [Client.Submit] would: to wait for a run submitted
// earlier, by this process or another.
func (c *Client) RunOf(agent, submission string) (Run, error) {
	if agent == "" {
		agent = protocol.DefaultAgent
	}
	if !protocol.ValidToken(agent) {
		return Run{}, fmt.Errorf("client: agent %q must match %s", agent, protocol.TokenPattern)
	}
	if !protocol.ValidToken(submission) {
		return Run{}, fmt.Errorf("client: submission id %q must match %s", submission, protocol.TokenPattern)
	}
	id := protocol.SubmissionRunID(c.name, submission)
	subject, _ := c.subjects.ClientRunResult(c.name, id)
	return Run{ID: id, Submission: submission, Agent: agent, Key: protocol.RunKey(c.name, id), Subject: subject}, nil
}

// ErrNotFound is returned by [Client.Result] when the runs bucket holds no
// result for the run: it has not finished, or its result expired (the
// bucket keeps results for its TTL, 24h by default).
var ErrNotFound = errors.New("client: no result stored for the run")

// RefusedError is the error of a run that never started: the coordinator
// that took it refused it (a malformed request, a bad field, too large) or
// gave it up (abandoned). Code is one of the protocol's codes (malformed,
// too_large, invalid_field, missing_field, unavailable, abandoned, …);
// Field names the request's field at fault, if any.
type RefusedError struct {
	Run     protocol.RunID
	Code    string
	Field   string
	Message string
}

func (e *RefusedError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("client: run %s refused: %s: field %q: %s", e.Run, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("client: run %s refused: %s: %s", e.Run, e.Code, e.Message)
}

// FailedError is the error of a run that started and failed (the model or
// the catalog failed): its result still answers every tool call.
type FailedError struct {
	Run     protocol.RunID
	Code    string
	Message string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("client: run %s failed: %s: %s", e.Run, e.Code, e.Message)
}

// resultError is the typed error a stored result carries, or nil.
func resultError(res *protocol.RunResult) error {
	switch {
	case res.Error == nil:
		return nil
	case res.TerminationReason == "":
		return &RefusedError{Run: res.RunID, Code: res.Error.Code, Field: res.Error.Field, Message: res.Error.Message}
	default:
		return &FailedError{Run: res.RunID, Code: res.Error.Code, Message: res.Error.Message}
	}
}
