package natscli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPathIsPinnedVersion(t *testing.T) {
	bin := Path(t)
	cmd := exec.Command(bin, "--version")
	cmd.Env = Env(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	if got := strings.TrimSpace(string(out)); got != Version {
		t.Errorf("nats --version = %q, want %q", got, Version)
	}
	if again := Path(t); again != bin {
		t.Errorf("second Path = %q, want the cached %q", again, bin)
	}
	// Install found the binary in place: the version check passes without
	// a build.
	if err := checkVersion(bin); err != nil {
		t.Errorf("checkVersion(%s): %v", bin, err)
	}
}

// A build whose go command writes to both stdout and stderr keeps every
// line in its error and shows each as progress (run with -race: the two
// streams once raced on one buffer).
func TestBuildKeepsBothStreams(t *testing.T) {
	dir := t.TempDir()
	goCmd := filepath.Join(dir, "fake-go")
	script := "#!/bin/sh\n" +
		"for i in 1 2 3 4 5 6 7 8 9 10; do echo \"out $i\"; echo \"err $i\" >&2; done\n" +
		"printf '#!/bin/sh\\necho v0\\n' > \"$GOBIN/nats\"\n" +
		"echo failing >&2; exit 3\n"
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	err := build(goCmd, filepath.Join(dir, "cache"), filepath.Join(dir, "nats"), &progress)
	if err == nil {
		t.Fatal("build of a go install that exits 3 succeeded")
	}
	for i := 1; i <= 10; i++ {
		for _, line := range []string{fmt.Sprintf("out %d\n", i), fmt.Sprintf("err %d\n", i)} {
			if !strings.Contains(err.Error(), line) || !strings.Contains(progress.String(), "  "+line) {
				t.Errorf("line %q missing from the error or the progress:\n%v\n%s", line, err, progress.String())
			}
		}
	}
	if !strings.Contains(err.Error(), "failing") {
		t.Errorf("error lacks the last line: %v", err)
	}
}
