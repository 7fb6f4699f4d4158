package mcptool

// Each failure of a call is one of these types, so the harness reports it to
// the model by its type name ("mcptool.ToolError"), never by a message.
type (
	// ToolError: the server answered isError (the tool itself failed; its
	// message is not passed on).
	ToolError struct{}
	// ProtocolError: the server answered the call with a JSON-RPC error
	// (an unknown tool, invalid parameters, an internal error).
	ProtocolError struct{}
	// ConnectionLost: the connection to the server broke while the call
	// was running (the server crashed, was killed or wrote garbage); the
	// call may or may not have taken effect. A stdio server is restarted.
	ConnectionLost struct{}
	// MessageTooLarge: the server sent a message larger than
	// ServerConfig.MaxMessageBytes; the connection was dropped.
	MessageTooLarge struct{}
	// OutputSchemaError: the structured result does not match the tool's
	// outputSchema, or is missing although the tool declares one.
	OutputSchemaError struct{}
	// ServerClosed: the server was stopped.
	ServerClosed struct{}
)

func (ToolError) Error() string       { return "mcp: the tool reported an error" }
func (ProtocolError) Error() string   { return "mcp: the server answered with a protocol error" }
func (ConnectionLost) Error() string  { return "mcp: the connection to the server was lost" }
func (MessageTooLarge) Error() string { return "mcp: the server sent a message over the size bound" }
func (OutputSchemaError) Error() string {
	return "mcp: the structured result does not match the output schema"
}
func (ServerClosed) Error() string { return "mcp: the server is stopped" }

// The error values a call returns.
var (
	ErrToolError         error = ToolError{}
	ErrProtocolError     error = ProtocolError{}
	ErrConnectionLost    error = ConnectionLost{}
	ErrMessageTooLarge   error = MessageTooLarge{}
	ErrOutputSchemaError error = OutputSchemaError{}
	ErrServerClosed      error = ServerClosed{}
)
