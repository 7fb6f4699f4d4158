// Package natscli gives tests the real nats command-line tool, pinned to
// the version operators are told to use, so operator workflows (watching
// requests, publishing decisions) are tested with the tool itself.
//
// # Caveats
//
// The first use builds natscli with "go install", which needs the Go
// toolchain and the module proxy (or a warm module cache) and takes a minute
// or two; the binary is then kept in the Go build cache directory and reused
// by later runs. Packages whose tests use it call [Prepare] from TestMain
// (and test.sh runs ./internal/natscli/install first), so the build is over
// before any test starts a clock. Tests are skipped only when the go command
// is missing; a failed build fails them.
package natscli
