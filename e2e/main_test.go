package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natscli"
)

// bins are the commands under test, built once by TestMain.
var bins struct {
	coordinator, toolworker, sidefx string
	mcpserver                       string // pkg/mcptool/mcptooltest/cmd/mcptestserver
	race                            bool   // built with the race detector
}

// binEnv names a directory holding the binaries buildBinaries would build
// (test.sh builds them once for its two runs of this package); unset, the
// package builds its own.
const binEnv = "TOOLFLEET_E2E_BIN"

func TestMain(m *testing.M) {
	code := 1
	// Everything the tests run is built before the first test starts a
	// deadline: on a fresh machine these builds take minutes.
	natscli.Prepare()
	if dir := os.Getenv(binEnv); dir != "" {
		if err := useBinaries(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		installNPMServers()
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "toolfleet-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "e2e: building coordinator, toolworker and sidefx")
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	} else {
		installNPMServers()
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// useBinaries takes the commands under test from dir, built as
// buildBinaries builds them.
func useBinaries(dir string) error {
	bins.coordinator = filepath.Join(dir, "coordinator")
	bins.toolworker = filepath.Join(dir, "toolworker")
	bins.sidefx = filepath.Join(dir, "sidefx")
	bins.mcpserver = filepath.Join(dir, "mcptestserver")
	bins.race = raceAvailable()
	for _, b := range []string{bins.coordinator, bins.toolworker, bins.sidefx, bins.mcpserver} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s=%s: %w", binEnv, dir, err)
		}
	}
	return nil
}

// buildBinaries builds the coordinator and toolworker (race-enabled when
// cgo works, as test.sh decides), the MCP test server and the sidefx exec
// tool into dir. The builds run at the same time: each is mostly a link.
func buildBinaries(dir string) error {
	bins.coordinator = filepath.Join(dir, "coordinator")
	bins.toolworker = filepath.Join(dir, "toolworker")
	bins.sidefx = filepath.Join(dir, "sidefx")
	bins.mcpserver = filepath.Join(dir, "mcptestserver")
	bins.race = raceAvailable()
	args := []string{"build", "-o", dir}
	if bins.race {
		args = append(args, "-race")
	}
	builds := [][]string{
		append(args, "./cmd/coordinator", "./cmd/toolworker"),
		{"build", "-o", bins.mcpserver, "./pkg/mcptool/mcptooltest/cmd/mcptestserver"},
		{"build", "-o", bins.sidefx, "./e2e/sidefx"},
	}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		wg.Go(func() { errs[i] = goCommand(b...) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func goCommand(args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// raceAvailable mirrors test.sh: the race detector needs cgo and a C
// compiler.
func raceAvailable() bool {
	out, err := exec.Command("go", "env", "CGO_ENABLED", "CC").Output()
	if err != nil {
		return false
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "1" {
		return false
	}
	_, err = exec.LookPath(f[1])
	return err == nil
}
