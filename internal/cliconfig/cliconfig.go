// Package cliconfig turns the configuration errors of toolfleet's libraries
// ([config.Error]) into a command's usage errors, each naming the flag (or
// environment variable) that sets the field at fault. Each command keeps
// its own [Flags] table: the libraries know only their Go fields.
package cliconfig

import (
	"strings"

	"github.com/toolfleet/toolfleet/pkg/config"
)

// Flags maps a configuration field path, as [config.Error.ConfigField]
// spells it from the configuration the command builds ("Loop.MaxRounds"),
// to the flag that sets it ("--max-rounds").
type Flags map[string]string

// Flag returns the flag of field: the table's entry, else the entry of the
// longest dotted prefix of field that has one, else the field itself.
func (f Flags) Flag(field string) string {
	for p := field; ; {
		if fl, ok := f[p]; ok {
			return fl
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return field
		}
		p = p[:i]
	}
}

// Describe returns one line per [config.Error] in err, "FLAG: PROBLEM", and
// nil when err holds none.
func (f Flags) Describe(err error) []string {
	var out []string
	for _, ce := range config.Errors(err) {
		out = append(out, f.Flag(ce.ConfigField())+": "+ce.ConfigProblem())
	}
	return out
}

// With returns a table holding f's entries and more's (more's win).
func (f Flags) With(more Flags) Flags {
	out := make(Flags, len(f)+len(more))
	for k, v := range f {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// Conn names the flags of the connection settings (natsbus.ConnConfig
// under the field Conn) and the subject prefix, which every command that
// connects to a fleet defines alike.
var Conn = Flags{
	"Conn":             "--nats-url",
	"Conn.URL":         "--nats-url",
	"Conn.CredsFile":   "--creds",
	"Conn.User":        "--user",
	"Conn.Password":    "--password",
	"Conn.JSDomain":    "--js-domain",
	"Conn.NKeyFile":    "env NATS_NKEY",
	"Conn.InboxPrefix": "env NATS_INBOX_PREFIX",
	"Conn.auth":        "--creds/--user/--password (or NATS_CREDS, NATS_USER, NATS_TOKEN, NATS_NKEY)",
	"Prefix":           "--prefix",
	"Level":            "--log-level",
}
