package providers

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

// MaxModels bounds the clients a [Models] keeps; when full it starts over
// (the clients are rebuilt as runs ask for them).
const MaxModels = 256

// Models makes the model clients of agents' definitions, one per distinct
// configuration (provider, model, base URL, key variable, temperature,
// max_tokens, script), and reuses it for every run that asks for the
// same: a serving coordinator runs many agents, each on its own provider
// and model, with one client each. Keys are read from the environment
// when a client is made, by the variable's name; no key is ever in a
// definition, a cache key, a journal, a log or a span, and a key is sent
// only to a host allowed for its variable ([agent.Definition.CheckKeyHosts],
// with the hosts of agent.EnvKeyHosts): a client for another is refused.
type Models struct {
	// Getenv reads a key variable and agent.EnvKeyHosts. Default:
	// os.Getenv.
	Getenv func(string) string
	// Logger is given to the clients (which log no content and no key).
	Logger zerolog.Logger

	mu sync.Mutex
	m  map[string]loop.Model
}

// Model returns the client of m, made on first use. Its signature is the
// hook pkg/serve and pkg/runner take (their Config.Models). The error
// names the missing key variable or the refused host, never a key.
func (ms *Models) Model(m agent.Model) (loop.Model, error) {
	k := modelKey(m)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if c, ok := ms.m[k]; ok {
		return c, nil
	}
	c, err := ms.make(m)
	if err != nil {
		return nil, err
	}
	if ms.m == nil || len(ms.m) >= MaxModels {
		ms.m = map[string]loop.Model{}
	}
	ms.m[k] = c
	return c, nil
}

// Len is the number of clients made and kept.
func (ms *Models) Len() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.m)
}

func modelKey(m agent.Model) string {
	t := "-"
	if m.Temperature != nil {
		t = strconv.FormatFloat(*m.Temperature, 'g', -1, 64)
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%d\x00%x", m.Provider, m.Name, m.BaseURL, m.KeyEnv(), t, m.MaxTokens, sha256.Sum256(m.Script))
}

func (ms *Models) make(m agent.Model) (loop.Model, error) {
	// Checked here, where the key is read, whatever was checked where the
	// definition was put: a key never leaves for a host not allowed for it.
	getenv := ms.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	allow, err := agent.ParseKeyHosts(getenv(agent.EnvKeyHosts))
	if err != nil {
		// Fail closed: no host more than the providers' own.
		ms.Logger.Warn().Msg("the model key hosts variable does not parse: keys go to their providers' hosts only")
	}
	d := agent.Definition{Model: m}
	if err := d.CheckKeyHosts(allow, getenv); err != nil {
		return nil, fmt.Errorf("providers: %w", err)
	}
	key := ""
	if name := m.KeyEnv(); name != "" {
		key = getenv(name)
		if key == "" {
			return nil, fmt.Errorf("providers: the environment variable %s (the model's key) is not set", name)
		}
	}
	switch m.Provider {
	case "openai":
		return openai.New(openai.Config{Model: m.Name, BaseURL: m.BaseURL, APIKey: key, Temperature: m.Temperature, MaxTokens: m.MaxTokens, Logger: ms.Logger})
	case "openai-responses":
		return responses.New(responses.Config{Model: m.Name, BaseURL: m.BaseURL, APIKey: key, Temperature: m.Temperature, MaxOutputTokens: m.MaxTokens, Logger: ms.Logger})
	case "anthropic":
		return anthropic.New(anthropic.Config{Model: m.Name, BaseURL: m.BaseURL, APIKey: key, Temperature: m.Temperature, MaxTokens: m.MaxTokens, Logger: ms.Logger})
	case "scripted":
		return scripted.Parse(m.Script)
	}
	return nil, fmt.Errorf("providers: unknown provider %q", m.Provider)
}
