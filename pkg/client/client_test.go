package client_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/config"
)

// TestNewRefusesBadConfig: a bad configuration is a config.Error naming
// the field, before anything is sent.
func TestNewRefusesBadConfig(t *testing.T) {
	nc := &nats.Conn{} // never used: every case fails before
	for field, tc := range map[string]struct {
		nc  *nats.Conn
		cfg client.Config
	}{
		"Conn":           {nil, client.Config{}},
		"Prefix":         {nc, client.Config{Prefix: "a.b"}},
		"Client":         {nc, client.Config{Client: "a b"}},
		"Domain":         {nc, client.Config{Domain: "x>"}},
		"AttemptTimeout": {nc, client.Config{AttemptTimeout: -1}},
	} {
		_, err := client.New(tc.nc, tc.cfg)
		var ce config.Error
		if !errors.As(err, &ce) || ce.ConfigField() != field {
			t.Errorf("%s: New = %v, want a config.Error naming %s", field, err, field)
		}
	}
}
