package embedded_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

func TestStartDefaultsUseLoopbackAndTemporaryStore(t *testing.T) {
	s, err := embedded.Start(embedded.Config{Listen: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("ClientURL = %q, want nats://127.0.0.1:<port>", s.ClientURL())
	}
	if s.Port() <= 0 {
		t.Fatalf("Port = %d, want the resolved random port", s.Port())
	}
	if !s.NATSServer().JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	dir := s.StoreDir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("store dir: %v", err)
	}

	// Both the TCP listener and in-process connections work.
	for name, connect := range map[string]func() (*nats.Conn, error){
		"tcp":        func() (*nats.Conn, error) { return nats.Connect(s.ClientURL()) },
		"in-process": func() (*nats.Conn, error) { return nats.Connect("", s.InProcess()) },
	} {
		nc, err := connect()
		if err != nil {
			t.Fatalf("%s connect: %v", name, err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatalf("%s flush: %v", name, err)
		}
		nc.Close()
	}

	s.Shutdown()
	s.Shutdown() // idempotent
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temporary store %s still present after Shutdown (stat error %v)", dir, err)
	}
}

func TestStartKeepsGivenStoreDir(t *testing.T) {
	dir := t.TempDir()
	s, err := embedded.Start(embedded.Config{StoreDir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Shutdown()
	if _, err := os.Stat(dir + "/jetstream"); err != nil {
		t.Fatalf("given store dir was not kept: %v", err)
	}
}

func TestStartRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  embedded.Config
	}{
		{"port out of range", embedded.Config{StoreDir: t.TempDir(), Port: 70000}},
		{"config text does not parse", embedded.Config{StoreDir: t.TempDir(), ConfigText: "authorization { "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := embedded.Start(tc.cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("Start succeeded, want an error")
			}
		})
	}
}

func TestLoggerReceivesServerNotices(t *testing.T) {
	buf := natstest.NewLogBuffer(t)
	s, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Logger: zerolog.New(buf).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Shutdown()
	if !strings.Contains(buf.String(), `"component":"nats-server"`) {
		t.Fatalf("no server log lines reached the logger; got %q", buf.String())
	}
}

// TestStartDoesNotListenUnlessAsked: the zero Config opens no TCP
// listener — nothing on the machine can reach the server — and serves
// in-process connections.
func TestStartDoesNotListenUnlessAsked(t *testing.T) {
	s, err := embedded.Start(embedded.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if s.ClientURL() != "" || s.Port() != 0 || s.Listening() {
		t.Fatalf("ClientURL %q port %d listening %v, want no listener", s.ClientURL(), s.Port(), s.Listening())
	}
	if addr := s.NATSServer().Addr(); addr != nil {
		t.Fatalf("the server listens on %v", addr)
	}
	nc, err := nats.Connect("", s.InProcess())
	if err != nil {
		t.Fatalf("in-process connect: %v", err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestGeneratedCredentials: a listening server with generated credentials
// refuses anyone without them, over TCP and in process; InProcess presents
// them; each start draws another password, which the server never logs.
func TestGeneratedCredentials(t *testing.T) {
	buf := natstest.NewLogBuffer(t)
	s, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Listen: true, GenerateCredentials: true,
		Logger: zerolog.New(buf).Level(zerolog.DebugLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	user, password := s.Credentials()
	if user != embedded.GeneratedUser || len(password) < 32 {
		t.Fatalf("credentials %q/%d bytes, want the generated user and a long password", user, len(password))
	}
	for name, opts := range map[string][]nats.Option{
		"no credentials":   nil,
		"wrong password":   {nats.UserInfo(user, password+"x")},
		"in-process, none": {nats.InProcessServer(s.NATSServer())},
	} {
		url := s.ClientURL()
		if strings.HasPrefix(name, "in-process") {
			url = ""
		}
		if nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(0))...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	for name, connect := range map[string]func() (*nats.Conn, error){
		"tcp":        func() (*nats.Conn, error) { return nats.Connect(s.ClientURL(), nats.UserInfo(user, password)) },
		"in-process": func() (*nats.Conn, error) { return nats.Connect("", s.InProcess()) },
	} {
		nc, err := connect()
		if err != nil {
			t.Fatalf("%s with the credentials: %v", name, err)
		}
		nc.Close()
	}
	other, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Listen: true, GenerateCredentials: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown()
	if _, p2 := other.Credentials(); p2 == password {
		t.Error("two starts drew the same password")
	}
	s.Shutdown()
	if buf.Contains(password) {
		t.Error("the server logged the generated password")
	}
}

// TestAccountsKeepTheirSubjectsApart: a server with Accounts keeps each
// account's subjects to itself but for what one exports and the other
// imports, and refuses a configuration it cannot hold (Accounts with
// ConfigText, an account twice).
func TestAccountsKeepTheirSubjectsApart(t *testing.T) {
	s, err := embedded.Start(embedded.Config{InProcessUser: "a", Accounts: []embedded.Account{
		{Name: "A", Users: []embedded.User{{Name: "a"}}, Exports: []embedded.Export{{Subject: "shared.*.>", Stream: true, AccountTokenPosition: 2}}},
		{Name: "B", Users: []embedded.User{{Name: "b"}}, Imports: []embedded.Import{{Account: "A", Subject: "shared.B.>", Stream: true}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	a, err := nats.Connect("", s.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := nats.Connect("", nats.InProcessServer(s.NATSServer()), nats.UserInfo("b", s.Password("b")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.SubscribeSync(">")
	if err != nil || b.Flush() != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"private.x", "shared.C.x", "shared.B.x"} {
		if err := a.Publish(subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || m.Subject != "shared.B.x" {
		t.Fatalf("B received %v, %v; want shared.B.x, its import, first", m, err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Errorf("B received %d more messages of A's, want only its import", n)
	}

	for name, cfg := range map[string]embedded.Config{
		"with ConfigText": {ConfigText: "max_payload: 1MB", Accounts: []embedded.Account{{Name: "A", Users: []embedded.User{{Name: "a"}}}}},
		"twice":           {Accounts: []embedded.Account{{Name: "A", Users: []embedded.User{{Name: "a"}}}, {Name: "A", Users: []embedded.User{{Name: "b"}}}}},
		"system":          {Accounts: []embedded.Account{{Name: embedded.SystemAccount, Users: []embedded.User{{Name: "a"}}}}},
	} {
		if s, err := embedded.Start(cfg); err == nil {
			s.Shutdown()
			t.Errorf("accounts %s: started", name)
		}
	}
}
