package agent_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/agent"
)

// TestCheckKeyHosts: a key goes to its provider's API host, the host of
// the coordinator's own base URL variable, or a host the coordinator
// allows for its variable; a definition naming any other is refused on
// model.base_url (or summarizer.base_url).
func TestCheckKeyHosts(t *testing.T) {
	env := map[string]string{"OPENAI_BASE_URL": "http://gateway.internal:8080/v1/"}
	getenv := func(n string) string { return env[n] }
	allow, err := agent.ParseKeyHosts("OPENAI_API_KEY=llm.example:8443, TEAM_API_KEY=team.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, provider, baseURL, keyEnv, want string
	}{
		{"provider's host", "openai", "https://api.openai.com/v1/", "", ""},
		{"provider's host over http", "openai", "http://api.openai.com/v1/", "", "model.base_url"},
		{"anthropic's host", "anthropic", "https://API.anthropic.com/", "", ""},
		{"another provider's host", "anthropic", "https://api.openai.com/v1/", "", "model.base_url"},
		{"the coordinator's base URL", "openai", "http://gateway.internal:8080/v1/", "", ""},
		{"listed host and port", "openai", "https://llm.example:8443/v1/", "", ""},
		{"listed host, another port", "openai", "https://llm.example:9443/v1/", "", "model.base_url"},
		{"listed for another variable", "openai", "https://team.example/v1/", "", "model.base_url"},
		{"listed for its variable, any port", "openai", "https://team.example:1234/v1/", "TEAM_API_KEY", ""},
		{"a local listener", "openai", "http://127.0.0.1:9999/v1/", "OPENAI_API_KEY", "model.base_url"},
		{"no base URL", "openai", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := agent.Definition{Name: "a", Model: agent.Model{Provider: tc.provider, Name: "m", BaseURL: tc.baseURL, APIKeyEnv: tc.keyEnv}}
			err := d.CheckKeyHosts(allow, getenv)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("CheckKeyHosts = %v, want %q", err, tc.want)
			}
			s := agent.Definition{Name: "a", Model: agent.Model{Provider: "scripted"}, Summarizer: &d.Model}
			if err := s.CheckKeyHosts(allow, getenv); (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), "summarizer.base_url")) {
				t.Fatalf("as the summarizer: %v", err)
			}
		})
	}
	if _, err := agent.ParseKeyHosts("OPENAI_API_KEY"); err == nil {
		t.Fatal("an entry without a host parsed")
	}
}
