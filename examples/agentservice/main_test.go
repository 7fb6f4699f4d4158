package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

func TestAskOverHTTP(t *testing.T) {
	tools, err := harness.Builtins([]string{"calculator"})
	if err != nil {
		t.Fatal(err)
	}
	fleet := fleettest.Start(t, fleettest.Config{Tools: tools})
	a, closeAgent, err := newAgent(t.Context(), fleet.Conn(), scripted.Demo())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAgent)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"question":"What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out askResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	if !strings.Contains(out.Answer, "1150") || out.RunID == "" {
		t.Fatalf("answer = %+v, want the sum 1150 and a run id", out)
	}

	bad, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Fatalf("a malformed request got %d, want 400", bad.StatusCode)
	}
}
