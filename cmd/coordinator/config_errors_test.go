package main

import (
	"strings"
	"testing"
)

// configCase is a bad configuration of one command: its arguments, the
// environment it runs with and what stderr must say — the flag (or
// environment variable) at fault, and optionally more of the message.
type configCase struct {
	name string
	args []string
	env  map[string]string
	want string
}

// checkConfigErrors runs cmd in process with each case and asserts exit
// status 2, a "coordinator CMD: " line that names the flag, and that
// nothing started (no log line) before the refusal. No case reaches NATS.
func checkConfigErrors(t *testing.T, cmd string, cases []configCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(t, append([]string{cmd}, tc.args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			if strings.Contains(stderr, `"level"`) {
				t.Fatalf("something started and logged before the refusal:\n%s", stderr)
			}
		})
	}
}

// fleetCases are bad fleet flags, which run, serve and resume share: each
// library's refusal, named by the flag.
func fleetCases(t *testing.T, cmd string, tail ...string) []configCase {
	c := func(name, want string, args ...string) configCase {
		return configCase{name: name, args: append(args, tail...), want: "coordinator " + cmd + ": " + want}
	}
	var prompt []string // run needs a prompt with --model; serve takes none
	if cmd == "run" {
		prompt = []string{"hi"}
	}
	return []configCase{
		c("zero max rounds", "--max-rounds must not be 0", "--max-rounds", "0"),
		c("negative max rounds", "--max-rounds: must be >= 1, got -1", "--max-rounds", "-1"),
		c("zero calls per round", "--max-tool-calls-per-round must not be 0", "--max-tool-calls-per-round", "0"),
		c("negative observation bound", "--max-observation-chars: must be >= 1", "--max-observation-chars", "-5"),
		c("calls kept not above per round", "--max-tool-calls-kept: must be more than the tool calls per round (32)", "--max-tool-calls-kept", "32"),
		c("zero transcript bytes", "--max-transcript-bytes must not be 0", "--max-transcript-bytes", "0"),
		c("negative run duration", "--max-run-duration: must be > 0", "--max-run-duration", "-1s"),
		c("zero tool timeout", "--tool-timeout must not be 0", "--tool-timeout", "0s"),
		c("negative tool timeout", "--tool-timeout: must be > 0", "--tool-timeout", "-1s"),
		c("negative approval timeout", "--approval-timeout: must be > 0", "--approval-timeout", "-1s"),
		c("bad approval list", "--require-approval: must list tool names or *", "--require-approval", "deploy,bad name"),
		c("negative workers", "--workers: must be >= 0", "--workers", "-1"),
		c("zero stream check interval", "--stream-check-interval must not be 0", "--stream-check-interval", "0s"),
		c("negative stream check interval", "--stream-check-interval: must be > 0", "--stream-check-interval", "-1s"),
		c("bad metrics address", "--metrics-addr: must be HOST:PORT", "--metrics-addr", "9090"),
		c("bad prefix", "--prefix: must match", "--prefix", "a.b"),
		c("missing creds", "--creds:", "--creds", "/does/not/exist.creds"),
		c("two ways to authenticate", "--creds/--user/--password", "--user", "u", "--creds", "/does/not/exist.creds"),
		c("password without user", "--user: a password is set without a user", "--password", "p"),
		c("missing manifest", "--tools:", "--tools", "/does/not/exist.json"),
		c("bad manifest", "--tools:", "--tools", badManifest(t)),
		c("unknown builtin", "--builtin:", "--builtin", "calculator,shell"),
		c("unknown log level", "--log-level: unknown level", "--log-level", "loud"),
		c("unknown model kind", "--model must be scripted:FILE", append([]string{"--model", "gpt:x"}, prompt...)...),
		c("missing script", "--model", append([]string{"--model", "scripted:/does/not/exist"}, prompt...)...),
		c("bad model base URL", "--model-base-url:", append([]string{"--model", "openai:gpt-test", "--model-base-url", "ftp://example.com"}, prompt...)...),
		{name: "model without its key", args: append([]string{"--model", "openai:gpt-test"}, append(prompt, tail...)...), env: map[string]string{"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}, want: "coordinator " + cmd + ": --model openai:gpt-test needs the provider's API key in env OPENAI_API_KEY"},
		{name: "anthropic model without its key", args: append([]string{"--model", "anthropic:claude-test"}, append(prompt, tail...)...), env: map[string]string{"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": ""}, want: "ANTHROPIC_API_KEY"},
		c("NATS URL of another scheme", "--nats-url: ftp://x: the scheme must be one of nats, tls, ws, wss", "--nats-url", "ftp://x"),
		c("NATS URL without a host", "--nats-url: nats:// has no host", "--nats-url", "nats://"),
		c("listen with a NATS URL", "--listen: is for the embedded server", "--nats-url", "nats://127.0.0.1:1", "--listen", "127.0.0.1:0"),
		{name: "missing nkey file", args: tail, env: map[string]string{"NATS_NKEY": "/does/not/exist.nk"}, want: "coordinator " + cmd + ": env NATS_NKEY:"},
	}
}

func TestRunConfigErrors(t *testing.T) {
	checkConfigErrors(t, "run", append(fleetCases(t, "run"),
		configCase{name: "bad output", args: []string{"--output", "yaml"}, want: "--output must be text or json"},
		configCase{name: "bad listen address", args: []string{"--listen", "nowhere"}, want: "coordinator run: --listen: must be HOST:PORT"},
		configCase{name: "no prompt with a model", args: []string{"--model", "scripted:x"}, want: "a PROMPT is required"},
		configCase{name: "unknown flag", args: []string{"--no-such-flag"}, want: "flag provided but not defined"},
	))
}

func TestServeConfigErrors(t *testing.T) {
	checkConfigErrors(t, "serve", append(fleetCases(t, "serve"),
		configCase{name: "zero concurrent runs", args: []string{"--max-concurrent-runs", "0"}, want: "coordinator serve: --max-concurrent-runs must not be 0"},
		configCase{name: "too many concurrent runs", args: []string{"--max-concurrent-runs", "20000"}, want: "coordinator serve: --max-concurrent-runs: must be 1..10000"},
		configCase{name: "huge requests", args: []string{"--max-request-bytes", "2000000"}, want: "coordinator serve: --max-request-bytes: must be 1..1048576"},
		configCase{name: "zero shutdown grace", args: []string{"--shutdown-grace", "0s"}, want: "coordinator serve: --shutdown-grace must not be 0"},
		configCase{name: "negative shutdown grace", args: []string{"--shutdown-grace", "-1s"}, want: "coordinator serve: --shutdown-grace: must be >= 0"},
		configCase{name: "short run ack wait", args: []string{"--run-ack-wait", "10ms"}, want: "coordinator serve: --run-ack-wait: must be >= 100ms"},
		configCase{name: "negative result ttl", args: []string{"--result-ttl", "-1s"}, want: "coordinator serve: --result-ttl: must be >= 0"},
		configCase{name: "long name", args: []string{"--name", strings.Repeat("n", 129)}, want: "coordinator serve: --name: must be at most 128 bytes long"},
		configCase{name: "store dir with a NATS URL", args: []string{"--nats-url", "nats://127.0.0.1:1", "--store-dir", t.TempDir()}, want: "coordinator serve: --store-dir: is for the embedded server"},
		configCase{name: "a prompt", args: []string{"a prompt"}, want: "takes no arguments"},
	))
}

func TestResumeConfigErrors(t *testing.T) {
	checkConfigErrors(t, "resume", append(fleetCases(t, "resume", "run-1"),
		configCase{name: "no run id", args: nil, want: "coordinator resume: takes one RUN id"},
		configCase{name: "bad run id", args: []string{"a.b"}, want: "coordinator resume: takes one RUN id"},
	))
}

func TestMCPConfigErrors(t *testing.T) {
	t.Setenv(envMCPTokens, "")
	c := func(name, want string, args ...string) configCase {
		return configCase{name: name, args: args, want: want}
	}
	checkConfigErrors(t, "mcp", []configCase{
		c("unknown transport", "--transport must be stdio or http", "--transport", "sse"),
		c("http without tokens", "needs bearer tokens in env TOOLFLEET_MCP_TOKENS", "--transport", "http"),
		c("relative path", "--http-path must start with /", "--http-path", "mcp"),
		c("zero concurrent calls", "--max-concurrent-calls must be 1..10000, got 0", "--max-concurrent-calls", "0"),
		c("zero connections per address", "--http-max-conns-per-addr must be >= 1, got 0", "--http-max-conns-per-addr", "0"),
		c("zero idle timeout", "--http-idle-timeout, --http-read-timeout and --http-write-timeout must be > 0", "--http-idle-timeout", "0s"),
		c("an argument", "coordinator mcp: takes no arguments", "extra"),
		c("zero tool timeout", "coordinator mcp: --tool-timeout must not be 0", "--tool-timeout", "0s"),
		c("negative observation bound", "coordinator mcp: --max-observation-chars: must be >= 1", "--max-observation-chars", "-1"),
		c("bad approval list", "coordinator mcp: --require-approval:", "--require-approval", "a.b"),
		c("negative workers", "coordinator mcp: --workers: must be >= 0", "--workers", "-1"),
		c("bad prefix", "coordinator mcp: --prefix:", "--prefix", "a>b"),
		c("missing creds", "coordinator mcp: --creds:", "--creds", "/does/not/exist.creds"),
		c("unknown builtin", "coordinator mcp: --builtin:", "--builtin", "shell"),
		c("bad metrics address", "coordinator mcp: --metrics-addr:", "--metrics-addr", ":70000"),
		c("unknown log level", "coordinator mcp: --log-level:", "--log-level", "loud"),
		c("a model flag", "flag provided but not defined: -model", "--model", "openai:x"),
	})
}

func TestSubmitConfigErrors(t *testing.T) {
	c := func(name, want string, args ...string) configCase {
		return configCase{name: name, args: args, want: want}
	}
	checkConfigErrors(t, "submit", []configCase{
		c("no prompt", "a PROMPT (or --messages FILE) is required"),
		c("prompt and messages", "give a PROMPT or --messages, not both", "--messages", "x.json", "hi"),
		c("negative max rounds", "--max-rounds must be >= 0", "--max-rounds", "-1", "hi"),
		c("negative tool timeout", "--tool-timeout must be >= 0", "--tool-timeout", "-1s", "hi"),
		c("bad output", "--output must be text or json", "--output", "yaml", "hi"),
		c("bad approval list", `field "require_approval"`, "--require-approval", "a.b", "hi"),
		c("missing messages", "--messages:", "--messages", "/does/not/exist"),
		c("bad prefix", "coordinator submit: --prefix:", "--prefix", "a.b", "hi"),
		c("bad client", "coordinator submit: --client must match", "--client", "a b", "hi"),
		c("missing creds", "coordinator submit: --creds:", "--creds", "/does/not/exist.creds", "hi"),
		c("password without user", "coordinator submit: --user:", "--password", "p", "hi"),
		{name: "missing nkey file", args: []string{"hi"}, env: map[string]string{"NATS_NKEY": "/does/not/exist.nk"}, want: "coordinator submit: env NATS_NKEY:"},
	})
}

func TestProvisionConfigErrors(t *testing.T) {
	c := func(name, want string, args ...string) configCase {
		return configCase{name: name, args: args, want: want}
	}
	checkConfigErrors(t, "provision", []configCase{
		c("two replicas", "coordinator provision: --replicas must be 1 or 3, got 2", "--replicas", "2"),
		c("bad placement tag", "coordinator provision: --placement-tags:", "--placement-tags", "ssd,fast disk"),
		c("zero result ttl", "coordinator provision: --result-ttl must not be 0", "--result-ttl", "0s"),
		c("negative result ttl", "coordinator provision: --result-ttl: must be >= 0", "--result-ttl", "-1s"),
		c("zero timeout", "coordinator provision: --timeout must not be 0", "--timeout", "0s"),
		c("bad prefix", "coordinator provision: --prefix:", "--prefix", "a.b"),
		c("an argument", "coordinator provision: takes no arguments", "extra"),
		c("missing creds", "coordinator provision: --creds:", "--creds", "/does/not/exist.creds"),
		c("password without user", "coordinator provision: --user:", "--password", "p"),
	})
}

func TestApprovalsConfigErrors(t *testing.T) {
	checkConfigErrors(t, "approvals", []configCase{
		{name: "no subcommand", want: "usage"},
		{name: "unknown subcommand", args: []string{"frob"}, want: "unknown command"},
		{name: "bad prefix", args: []string{"list", "--prefix", "a.b"}, want: "--prefix"},
		{name: "missing creds file", args: []string{"list"}, env: map[string]string{"NATS_CREDS": "/does/not/exist.creds"}, want: "coordinator approvals: env NATS_CREDS:"},
		{name: "password without user", args: []string{"list"}, env: map[string]string{"NATS_PASSWORD": "p"}, want: "coordinator approvals: env NATS_USER:"},
	})
}

func TestRunsConfigErrors(t *testing.T) {
	checkConfigErrors(t, "runs", []configCase{
		{name: "no subcommand", want: "usage"},
		{name: "unknown subcommand", args: []string{"frob"}, want: "unknown command"},
		{name: "show without a run", args: []string{"show"}, want: "takes 1 argument(s)"},
		{name: "bad run id", args: []string{"show", "a.b"}, want: "is not a run id"},
		{name: "bad prefix", args: []string{"list", "--prefix", "a.b"}, want: "--prefix"},
		{name: "missing creds file", args: []string{"list"}, env: map[string]string{"NATS_CREDS": "/does/not/exist.creds"}, want: "coordinator runs: env NATS_CREDS:"},
	})
}
