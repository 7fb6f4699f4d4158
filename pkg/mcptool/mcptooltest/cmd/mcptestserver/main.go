// Command mcptestserver serves the mcptooltest MCP server over stdio, for
// tests. Its first argument is the mode ("1" by default, or "badschema").
package main

import (
	"context"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
)

func main() {
	mode := "1"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	if err := mcptooltest.NewServer(mode).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}
