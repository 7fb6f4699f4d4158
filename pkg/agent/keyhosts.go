package agent

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/config"
)

// EnvKeyHosts names the coordinator's variable that lets a key variable
// reach hosts besides its provider's API host: a comma list of
// VARIABLE=HOST or VARIABLE=HOST:PORT ("OPENAI_API_KEY=llm.internal:8443,
// ANTHROPIC_API_KEY=gateway.example"). It is the coordinator's own
// configuration, never a definition's.
const EnvKeyHosts = "TOOLFLEET_MODEL_KEY_HOSTS"

// providerHosts are the API hosts each provider's keys go to by default.
var providerHosts = map[string]string{
	"openai":           "api.openai.com",
	"openai-responses": "api.openai.com",
	"anthropic":        "api.anthropic.com",
}

// providerBaseEnv are the coordinator's own base URL variables: the host
// an operator set there may receive that provider's keys.
var providerBaseEnv = map[string]string{
	"openai":           "OPENAI_BASE_URL",
	"openai-responses": "OPENAI_BASE_URL",
	"anthropic":        "ANTHROPIC_BASE_URL",
}

// KeyHosts says which hosts each key variable may be sent to besides its
// provider's API host (and the host of the coordinator's own *_BASE_URL
// variable): by variable, "host" (any port) or "host:port", in lower case.
// The zero value allows nothing more.
type KeyHosts map[string][]string

// ParseKeyHosts parses the value of [EnvKeyHosts]. An entry that is not
// VARIABLE=HOST[:PORT] is an error naming it.
func ParseKeyHosts(s string) (KeyHosts, error) {
	out := KeyHosts{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, host, ok := strings.Cut(e, "=")
		host = strings.ToLower(strings.TrimSpace(host))
		if !ok || !envPattern.MatchString(strings.TrimSpace(name)) || host == "" || strings.ContainsAny(host, "/@ ") {
			return nil, fmt.Errorf("agent: %s: an entry must be VARIABLE=HOST or VARIABLE=HOST:PORT, got %q", EnvKeyHosts, clip(e))
		}
		name = strings.TrimSpace(name)
		out[name] = append(out[name], host)
	}
	return out, nil
}

// allows reports whether the key in variable name may be sent to u.
func (k KeyHosts) allows(name string, u *url.URL) bool {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	for _, a := range k[name] {
		ah, ap, err := net.SplitHostPort(a)
		if err != nil {
			ah, ap = strings.Trim(a, "[]"), ""
		}
		if ah == host && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

// CheckKeyHosts checks that the key of d's model (and of its summarizer)
// goes only to a host the coordinator allows for its variable: a
// base_url's host must be its provider's API host, the host of the
// coordinator's own base URL variable for that provider (read with
// getenv; nil reads none) or one that allow lists for the variable. The
// error is a [config.Error] for model.base_url (or summarizer.base_url):
// a definition that names another host for a key is refused, so the key
// is never sent there.
func (d *Definition) CheckKeyHosts(allow KeyHosts, getenv func(string) string) error {
	check := func(field string, m *Model) error {
		name := m.KeyEnv()
		if m.BaseURL == "" || name == "" {
			return nil // the provider's URL, or the operator's: no key leaves for a host the definition names
		}
		u, err := url.Parse(m.BaseURL)
		if err != nil || u.Hostname() == "" {
			return config.Errorf(field+".base_url", "must be a URL with a host")
		}
		host := strings.ToLower(u.Hostname())
		if host == providerHosts[m.Provider] && u.Scheme == "https" {
			return nil
		}
		if env := providerBaseEnv[m.Provider]; getenv != nil && env != "" {
			if b, err := url.Parse(getenv(env)); err == nil && b.Hostname() != "" &&
				strings.EqualFold(b.Hostname(), u.Hostname()) && b.Port() == u.Port() && b.Scheme == u.Scheme {
				return nil
			}
		}
		if allow.allows(name, u) {
			return nil
		}
		return config.Errorf(field+".base_url", "the key in %s may only be sent to %s or a host the coordinator's %s allows for it, got host %q",
			name, providerHosts[m.Provider], EnvKeyHosts, clip(u.Host))
	}
	if err := check("model", &d.Model); err != nil {
		return err
	}
	if d.Summarizer != nil {
		return check("summarizer", d.Summarizer)
	}
	return nil
}
