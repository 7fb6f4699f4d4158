package embedded

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
)

// SystemAccount is the name of the system account a server with
// [Config.Accounts] gets: it has no user, so nobody may connect to it.
const SystemAccount = "SYS"

// Account is one account of the server: a subject space of its own, which
// shares with the others only what it exports and they import.
type Account struct {
	// Name is the account's name.
	Name string
	// JetStream enables JetStream in the account. Default: off.
	JetStream bool
	// Users are the account's users; an empty password is drawn at start
	// ([Server.Password]).
	Users []User
	// Exports are the subjects other accounts may import.
	Exports []Export
	// Imports are the subjects the account imports from others.
	Imports []Import
}

// Export is a subject an account shares.
type Export struct {
	// Subject is the exported subject (wildcards allowed).
	Subject string
	// Stream exports a stream (one-way messages); default: a service
	// (requests, answered back into the importing account).
	Stream bool
	// AccountTokenPosition, when not 0, is the 1-based position of the
	// subject's token that must be the importing account's name.
	AccountTokenPosition int
	// Accounts, when set, are the only accounts that may import it.
	// Default: any.
	Accounts []string
	// ResponseStream marks a service answered with several messages (a
	// batched direct get): response_type stream. Default: one answer.
	ResponseStream bool
}

// Import is a subject an account takes from another's export.
type Import struct {
	// Account is the exporting account's name.
	Account string
	// Subject is the imported subject.
	Subject string
	// Stream imports a stream; default: a service.
	Stream bool
}

// accountsConfig renders accounts, with every user's password taken from
// passwords, as nats-server configuration (JSON, which its parser reads),
// with a system account nobody may use.
func accountsConfig(accounts []Account, passwords map[string]string) (string, error) {
	type m = map[string]any
	all := m{}
	for _, a := range accounts {
		if a.Name == "" || a.Name == SystemAccount {
			return "", fmt.Errorf("embedded: account name %q", a.Name)
		}
		if _, dup := all[a.Name]; dup {
			return "", fmt.Errorf("embedded: account %q twice", a.Name)
		}
		users := []m{}
		for _, u := range a.Users {
			user := m{"user": u.Name, "password": passwords[u.Name]}
			if u.Permissions != nil {
				user["permissions"] = permissionsConfig(u.Permissions)
			}
			users = append(users, user)
		}
		acc := m{"users": users}
		if a.JetStream {
			acc["jetstream"] = "enabled"
		}
		var exports, imports []m
		for _, e := range a.Exports {
			kind := "service"
			if e.Stream {
				kind = "stream"
			}
			x := m{kind: e.Subject}
			if e.AccountTokenPosition != 0 {
				x["account_token_position"] = e.AccountTokenPosition
			}
			if e.Accounts != nil {
				x["accounts"] = e.Accounts
			}
			if e.ResponseStream {
				x["response_type"] = "stream"
			}
			exports = append(exports, x)
		}
		for _, i := range a.Imports {
			kind := "service"
			if i.Stream {
				kind = "stream"
			}
			imports = append(imports, m{kind: m{"account": i.Account, "subject": i.Subject}})
		}
		if exports != nil {
			acc["exports"] = exports
		}
		if imports != nil {
			acc["imports"] = imports
		}
		all[a.Name] = acc
	}
	all[SystemAccount] = m{"users": []m{}}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // ">" stays ">"
	if err := enc.Encode(m{"accounts": all, "system_account": SystemAccount}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// permissionsConfig is p in configuration form.
func permissionsConfig(p *server.Permissions) map[string]any {
	out := map[string]any{}
	subj := func(sp *server.SubjectPermission) map[string]any {
		x := map[string]any{}
		if sp.Allow != nil {
			x["allow"] = sp.Allow
		}
		if sp.Deny != nil {
			x["deny"] = sp.Deny
		}
		return x
	}
	if p.Publish != nil {
		out["publish"] = subj(p.Publish)
	}
	if p.Subscribe != nil {
		out["subscribe"] = subj(p.Subscribe)
	}
	if p.Response != nil {
		out["allow_responses"] = map[string]any{"max": p.Response.MaxMsgs, "expires": p.Response.Expires.String()}
	}
	return out
}

// accountUsers returns the users of accounts, or an error for a user
// without a name or named twice.
func accountUsers(accounts []Account) ([]User, error) {
	var users []User
	for _, a := range accounts {
		users = append(users, a.Users...)
	}
	if len(users) == 0 {
		return nil, errors.New("embedded: accounts without a user")
	}
	return users, nil
}
