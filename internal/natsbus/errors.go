package natsbus

import (
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ConfigError is a configuration value that cannot work; retrying does not
// help. Field names the configuration field (its Go name, e.g. "CredsFile",
// or an environment variable).
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("natsbus: %s: %v", e.Field, e.Err) }

func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigField returns e.Field: ConfigError is a [config.Error].
func (e *ConfigError) ConfigField() string { return e.Field }

// ConfigProblem returns the text of e.Err.
func (e *ConfigError) ConfigProblem() string { return e.Err.Error() }

// ConfigErr returns a [ConfigError] for field, its problem formatted as
// fmt.Errorf would.
func ConfigErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// ErrorCode returns a short stable code for err, for logs: the protocol
// error code when there is one. It never returns the error's text, which may
// quote a payload.
func ErrorCode(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	var ce CodedError
	if errors.As(err, &ce) {
		return string(ce)
	}
	return "internal"
}

// CodedError is a refusal whose text is its code.
type CodedError string

func (e CodedError) Error() string { return string(e) }

// ErrProvisionedAckWait is a tool's consumer that the worker may not
// change (provisioned for a worker in an account of its own) with another
// ack wait than the worker's: the worker takes no call from it, since its
// heartbeats would not keep a running call from being redelivered.
var ErrProvisionedAckWait = errors.New("natsbus: the provisioned consumer has another ack wait, which this worker may not change")

// ErrForeignConsumer is a tool's consumer that is a push consumer: the
// worker takes no call from it.
var ErrForeignConsumer = errors.New("natsbus: the consumer is not a pull consumer")
