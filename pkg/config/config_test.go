package config_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/config"
)

func TestErrorsWalksJoinsAndWrapping(t *testing.T) {
	a := config.Errorf("MaxRounds", "must be >= 1, got %d", 0)
	b := config.Prefix("Conn", config.Errorf("CredsFile", "no such file"))
	err := fmt.Errorf("open: %w", errors.Join(a, errors.New("other"), fmt.Errorf("wrapped: %w", b)))
	var got []string
	for _, e := range config.Errors(err) {
		got = append(got, e.ConfigField()+"|"+e.ConfigProblem())
	}
	want := []string{"MaxRounds|must be >= 1, got 0", "Conn.CredsFile|no such file"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Errors = %q, want %q", got, want)
	}
	if config.Errors(errors.New("plain")) != nil || config.Errors(nil) != nil {
		t.Fatal("Errors of an error without a config error is not nil")
	}
	var ce config.Error
	if !errors.As(err, &ce) || ce.ConfigField() != "MaxRounds" {
		t.Fatalf("errors.As finds %v, want the MaxRounds error", ce)
	}
}
