package logging

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

func TestNewWritesJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "info", "svc1")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hello")
	log.Debug().Msg("hidden")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q", buf.String())
	}
	if line["svc"] != "svc1" || line["message"] != "hello" {
		t.Fatalf("line = %v", line)
	}
}

func TestDevNullIsNotATerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("/dev/null taken for a terminal: logs would go through the slow console writer")
	}
}

func TestNewRefusesUnknownLevel(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "loud", "x"); err == nil {
		t.Fatal("level \"loud\" accepted")
	}
}
