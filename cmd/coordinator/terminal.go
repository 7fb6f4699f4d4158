package main

import (
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/termui"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// terminal prepares "coordinator run" for a person at a terminal: with
// text output on a terminal, logs go to stderr at warn unless --log-level
// says otherwise, and the calls show as live status lines on stdout. It
// returns the display, or nil for JSON output or output that is not a
// terminal, which stay as they are. coord returns the coordinator once it
// is open, for the command that approves a call.
func (f *runFlags) terminal(stdout io.Writer, set map[string]bool, coord func() *coordinator.Coordinator) *termui.Display {
	if f.output != "text" || !logging.IsTerminal(stdout) {
		return nil
	}
	if !set["log-level"] {
		f.logLevel = "warn"
	}
	width := 0
	if file, ok := stdout.(*os.File); ok {
		width = termui.Width(file)
	}
	d := termui.New(stdout, termui.Config{Live: true, Width: width, ApproveCommand: func(run protocol.RunID, key protocol.CallKey) string {
		return approveCommand(coord(), f.natsURL, run, key)
	}})
	f.observer = d.Observer()
	return d
}

// approveCommand is the command that approves a call of this run from
// another terminal.
func approveCommand(c *coordinator.Coordinator, natsURL string, run protocol.RunID, key protocol.CallKey) string {
	cmd := fmt.Sprintf("coordinator approvals approve %s %s", run, key)
	switch {
	case natsURL != "":
		if u, err := url.Parse(natsURL); err == nil && u.User != nil {
			u.User = nil // credentials stay off the screen
			natsURL = u.String()
		}
		return cmd + " --nats-url " + natsURL
	case c != nil && c.CredentialsFile() != "":
		return fmt.Sprintf("%s (with the URL and credentials in %s)", cmd, c.CredentialsFile())
	default:
		return cmd + " (this embedded server takes no connections: run with --listen 127.0.0.1:0 to approve from another terminal)"
	}
}
