// Command coordinator runs the coordinator side of a toolfleet: the ReAct
// loop whose tool calls execute on toolworkers over NATS JetStream.
//
//	coordinator run [flags] PROMPT        run one prompt and print the result
//	coordinator serve [flags]             serve submitted runs until SIGTERM
//	coordinator submit [flags] PROMPT     submit a run to the serving coordinators
//	coordinator approvals list|approve|deny ...   answer pending approvals
//	coordinator mcp [flags]               serve the fleet's tools to MCP clients
//
// Run "coordinator run --help" (or serve, submit) for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/toolfleet/toolfleet/internal/tracing/tracingsdk"

	"github.com/toolfleet/toolfleet/internal/procsec"
)

// Exit statuses of docs/design.md §6.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitMaxRounds = 3
)

// What the exit statuses mean, as the usage of the commands that share
// them says.
const (
	// exitsRun: "coordinator run" and "coordinator resume".
	exitsRun = "0 final answer, 3 max rounds reached, 2 bad usage or config, 1 other error"
	// exitsServe: "coordinator serve" and "coordinator console".
	exitsServe = "0 stopped by SIGINT or SIGTERM, 2 bad usage or config, 1 other error"
)

func main() {
	// Credentials stay out of reach of the tools of in-process workers:
	// secrets leave the environment (procsec.Getenv still reads them) and
	// the process is not dumpable, so /proc/<pid>/environ, mem and fd are
	// closed to processes of the same uid.
	procsec.Take()
	hardenErr := procsec.Harden()
	code := tracingsdk.Main("toolfleet-coordinator", os.Stderr, func() int { return run(os.Args[1:], os.Stdout, os.Stderr) })
	if hardenErr != nil {
		fmt.Fprintln(os.Stderr, "coordinator: could not make the process non-dumpable:", hardenErr)
	}
	os.Exit(code)
}

// warnCommandLine warns about credentials given on the command line, which
// every local user reads in /proc/<pid>/cmdline.
func warnCommandLine(log zerolog.Logger, args []string) {
	if found := procsec.CommandLineSecrets(args); len(found) > 0 {
		log.Warn().Strs("flags", found).
			Msg("a password on the command line is readable by every local user (/proc/<pid>/cmdline): use env NATS_PASSWORD or a credentials file (--creds)")
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "coordinator: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// commands are the coordinator's commands by name; each takes the words
// after its name and returns the exit status.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"run":       runCommand,
	"serve":     serveCommand,
	"submit":    submitCommand,
	"approvals": approvals.command,
	"mcp":       mcpCommand,
	"provision": provisionCommand,
	"resume":    resumeCommand,
	"runs":      runsGroup(agentModel).command,
	"agents":    agentsGroup(lookupEnv).command,
	"tools":     tools.command,
	"console":   consoleCommand,
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  coordinator run [flags] PROMPT                  run one prompt over the fleet
  coordinator serve [flags]                       serve submitted runs until SIGTERM
  coordinator submit [--wait] [flags] PROMPT      submit a run to the serving coordinators
  coordinator approvals list|approve|deny [...]   see and answer pending approvals
  coordinator mcp [--transport stdio|http]        serve the fleet's tools to MCP clients
  coordinator provision [flags]                   create or update the fleet's streams (admin)
  coordinator runs list|show RUN|cancel RUN       see and steer durable runs (journals; operator)
  coordinator runs id SUBMISSION [--client C]     the run id of a submission (reads nothing)
  coordinator agents put FILE|get NAME|ls|rm NAME  the fleet's agents (admin, operator)
  coordinator resume [flags] RUN                  continue a killed "coordinator run --nats-url"
  coordinator tools pause|resume|limit|status TOOL  a tool's kill switch and rate limit, fleet-wide (operator)
  coordinator tools history [TOOL] [--limit N]    who paused, resumed or limited what, when and why (operator)
  coordinator console [--addr HOST:PORT] [flags]   the fleet's HTTP API, each request as its user's NATS identity (docs/api.md)

Each command connects as one user of deploy/nats-server.conf (docs/setup.md):
env NATS_URL, NATS_USER, NATS_PASSWORD.

"coordinator run --help" (or serve, submit) lists the flags.
`)
}
