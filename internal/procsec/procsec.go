// Package procsec keeps a process's credentials out of reach of the tools
// it runs: it takes secrets out of the environment once they are read
// ([Take], [Getenv]), makes the process non-dumpable so that processes of
// the same user cannot read its memory, environment or file descriptors
// through /proc or ptrace ([Harden]), and warns about passwords on the
// command line, which every local user can read in /proc/<pid>/cmdline
// ([CommandLineSecrets]).
package procsec

import (
	"net/url"
	"os"
	"strings"
	"sync"
)

// secretSuffixes mark environment variables that hold credentials.
var secretSuffixes = []string{"_PASSWORD", "_TOKEN", "_TOKENS", "_API_KEY", "_SECRET"}

// IsSecretName reports whether an environment variable of that name holds a
// credential: NATS_PASSWORD, NATS_TOKEN, OPENAI_API_KEY, ANTHROPIC_API_KEY,
// TOOLFLEET_MCP_TOKENS, and any other *_PASSWORD, *_TOKEN(S), *_API_KEY or
// *_SECRET.
func IsSecretName(name string) bool {
	for _, s := range secretSuffixes {
		if strings.HasSuffix(strings.ToUpper(name), s) {
			return true
		}
	}
	return false
}

var (
	mu    sync.RWMutex
	taken = map[string]string{}
)

// Take moves every secret variable (IsSecretName) out of the process's
// environment into a private store that [Getenv] reads: os.Getenv no longer
// sees them, no child inherits them, and on Linux their values are also
// overwritten in the environment block the kernel shows in
// /proc/<pid>/environ. It returns the names taken. Call it once the
// process has read what it needs from the environment by other means, and
// before it starts any tool.
func Take() []string {
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, kv := range os.Environ() {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !IsSecretName(name) {
			continue
		}
		taken[name] = value
		os.Unsetenv(name)
		names = append(names, name)
	}
	if len(names) > 0 {
		scrubEnvironBlock()
	}
	return names
}

// Getenv is os.Getenv that also sees the secrets [Take] took.
func Getenv(name string) string {
	mu.RLock()
	v, ok := taken[name]
	mu.RUnlock()
	if ok {
		return v
	}
	return os.Getenv(name)
}

// Harden makes the process non-dumpable (Linux: prctl PR_SET_DUMPABLE 0):
// /proc/<pid>/environ, mem, fd and ptrace are then closed to processes of
// the same user, such as the exec tools a worker runs. Call it after
// start-up (a set-uid exec or a credential change resets it). It returns
// an error where it could not be done, and nil where the platform has no
// such setting.
func Harden() error { return harden() }

// CommandLineSecrets returns the flags of args that carry a password (a
// --password flag, a nats://user:pass@ URL), by flag name, never the value.
// Every local user can read a process's command line in /proc/<pid>/cmdline
// whatever the process does later: credentials belong in the environment
// or a credentials file.
func CommandLineSecrets(args []string) []string {
	var found []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			if hasURLPassword(a) {
				found = append(found, "argument")
			}
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "password" || name == "token" || IsSecretName(strings.ReplaceAll(name, "-", "_")):
			found = append(found, "--"+name)
			if !hasValue {
				i++
			}
		case strings.Contains(name, "url") || name == "server" || name == "s":
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if hasURLPassword(value) {
				found = append(found, "--"+name)
			}
		}
	}
	return found
}

// hasURLPassword reports whether s is a URL (or a comma list of them) with
// a password in its user info.
func hasURLPassword(s string) bool {
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			return true
		}
	}
	return false
}
