// Command install builds the nats CLI that the tests use (natscli
// [natscli.Version]) into the Go build cache, printing its progress, and
// prints the binary's path. test.sh runs it before any test starts, so a
// fresh machine's slow first build is never inside a test's deadline.
package main

import (
	"fmt"
	"os"

	"github.com/toolfleet/toolfleet/internal/natscli"
)

func main() {
	bin, err := natscli.Install(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
