package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/tracing/tracemeta"
)

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// callAnswer is what the SDK returned for a tools/call.
type callAnswer struct {
	r   *mcp.CallToolResult
	err error
}

// call runs one tools/call. It returns as soon as ctx ends (the harness then
// answers timeout or cancelled); the SDK sends notifications/cancelled and
// the tracker kills a stdio server that keeps working past the grace.
func (s *Server) call(ctx context.Context, e *toolEntry, args json.RawMessage) (string, error) {
	sess, err := s.waitLive(ctx)
	if err != nil {
		return "", err
	}
	ctx, end := s.startCallSpan(ctx, e)
	token := fmt.Sprintf("%s-%d", s.cfg.Name, s.calls.Add(1))
	meta := mcp.Meta{"progressToken": token}
	defer s.sinks.follow(ctx, token)()
	// The server's own spans join the fleet's trace.
	tracemeta.Inject(ctx, meta)
	ch := make(chan callAnswer, 1)
	go func() {
		r, err := sess.cs.CallTool(ctx, &mcp.CallToolParams{Name: e.mcpName, Arguments: json.RawMessage(args), Meta: meta})
		ch <- callAnswer{r, err}
	}()
	out, err := s.answer(ctx, e, sess, ch)
	end(err)
	return out, err
}

// answer waits for the call's answer and turns it into the tool's output.
func (s *Server) answer(ctx context.Context, e *toolEntry, sess *session, ch <-chan callAnswer) (string, error) {
	var a callAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if a.err != nil {
		return "", s.callError(ctx, sess, a.err)
	}
	if a.r.IsError {
		return "", ErrToolError
	}
	return s.render(e, a.r)
}

// callError classifies a failed call; the message of err (which may quote
// the server) is never passed on.
func (s *Server) callError(ctx context.Context, sess *session, err error) error {
	var we *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &we):
		return ErrProtocolError
	case s.ctx.Err() != nil:
		return ErrServerClosed
	case sess.track != nil && sess.track.wasTooLarge():
		return ErrMessageTooLarge
	}
	if sess.proc == nil {
		// An HTTP session that failed is replaced by a new one.
		sess.cs.Close()
	}
	return ErrConnectionLost
}

// render turns a result into the tool's output, redacted.
func (s *Server) render(e *toolEntry, r *mcp.CallToolResult) (string, error) {
	if r.StructuredContent != nil {
		data, err := json.Marshal(r.StructuredContent)
		if err != nil {
			return "", ErrOutputSchemaError
		}
		if e.output != nil {
			if err := e.output.Validate(data); err != nil {
				return "", ErrOutputSchemaError
			}
		}
		return s.secrets.redact(string(data)), nil
	}
	if e.output != nil {
		return "", ErrOutputSchemaError
	}
	var b strings.Builder
	for i, c := range r.Content {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(describeContent(c))
	}
	return s.secrets.redact(b.String()), nil
}

// describeContent renders one content part: text as it is, binary data as a
// placeholder naming its type and size.
func describeContent(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return placeholder("image", c.MIMEType, len(c.Data), "")
	case *mcp.AudioContent:
		return placeholder("audio", c.MIMEType, len(c.Data), "")
	case *mcp.ResourceLink:
		return fmt.Sprintf("[resource link: %s]", clipURI(c.URI))
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return "[resource]"
		}
		if c.Resource.Blob != nil {
			return placeholder("resource", c.Resource.MIMEType, len(c.Resource.Blob), c.Resource.URI)
		}
		return c.Resource.Text
	}
	return fmt.Sprintf("[%T content omitted]", c)
}

func placeholder(kind, mime string, n int, uri string) string {
	if mime == "" {
		mime = "application/octet-stream"
	}
	mime, _ = strings.CutSuffix(clip(mime), "\n")
	s := fmt.Sprintf("[%s: %s, %d bytes", kind, mime, n)
	if uri != "" {
		s += ", " + clipURI(uri)
	}
	return s + "]"
}

func clipURI(u string) string {
	if len(u) > 256 {
		return u[:256] + "…"
	}
	return u
}
