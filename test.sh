#!/usr/bin/env bash
# The project's test command (see README): formatting, vet, the test suite
# (race-enabled where cgo is available; the e2e package's parallel tests
# beside the other packages, then its chaos, load and time-bounded tests by
# themselves) and a short run of a rotating quarter of the fuzz targets
# (plus every target of a package the last commit changed).
#
#   ./test.sh                  what CI runs
#   ./test.sh fast [PKG...]    the inner loop: gofmt, vet and go test -short
#                              -race of the packages you changed (against
#                              main, or HEAD~1 on main) or of PKG...; no
#                              e2e, no fuzzing
#   FUZZTIME=30s ./test.sh     fuzz each chosen target longer (default 5s; 0 skips fuzzing)
#   FUZZJOBS=1 ./test.sh       fuzz one target at a time (default 2, one worker each)
#   FUZZALL=1 ./test.sh        fuzz every target, not the rotating quarter
#   TESTP=1 ./test.sh          test one package at a time (default 3)
#   E2E_BESIDE=0 ./test.sh     the e2e package after the others, not beside them
set -euo pipefail
cd "$(dirname "$0")"
FUZZTIME=${FUZZTIME:-5s}

# phase NAME [HEADER] starts a phase: it prints how long the previous one
# took and HEADER (or NAME); at the end, pass or fail, the wall time of
# each phase is listed.
phases=() phase_name= phase_start=$SECONDS
phase() {
  if [ -n "$phase_name" ]; then
    local took=$((SECONDS - phase_start))
    echo "   ($phase_name took ${took}s)"
    phases+=("$(printf '%5ds  %s' "$took" "$phase_name")")
  fi
  phase_name=$1 phase_start=$SECONDS
  [ -z "$1" ] || echo "== ${2:-$1}"
}
e2epid= e2elog= e2ebin=
on_exit() {
  local code=$?
  # a background step still running (this run failed or was stopped)
  [ -z "$e2epid" ] || kill -- "-$e2epid" 2>/dev/null || true
  [ -z "${fuzzwarm:-}" ] || kill -- "-$fuzzwarm" 2>/dev/null || true
  [ -z "$e2elog" ] || rm -f "$e2elog"
  [ -z "$e2ebin" ] || rm -rf "$e2ebin"
  phase ""
  echo "== wall time by phase:"
  printf '%s\n' "${phases[@]}"
  printf '%5ds  in all\n' "$SECONDS"
  return $code
}
trap on_exit EXIT

# changed_packages prints the package directories holding Go files changed
# against main (or against HEAD~1 when on main), committed or not, leaving
# out those of a module of their own (bench/peers): this module's go
# commands cannot name them.
changed_packages() {
  local base=main
  [ "$(git rev-parse --abbrev-ref HEAD 2>/dev/null)" = main ] && base=HEAD~1
  { git diff --name-only "$base" 2>/dev/null; git ls-files --others --exclude-standard; } |
    grep '\.go$' | xargs -r -n1 dirname | sort -u | while read -r d; do
      [ -d "$d" ] && [ "$(cd "$d" && go env GOMOD)" = "$PWD/go.mod" ] && echo "./$d"
    done
}

# race is -race where cgo works. go vet takes it too: vet type-checks
# against its dependencies' compiled export data, so with the same build
# flags as the tests it shares their compile cache instead of compiling
# every dependency a second time (a full compile on a fresh machine). The
# project has no race-tagged files, so vet reads the same sources.
race=-race
if [ "$(go env CGO_ENABLED)" != "1" ] || ! command -v "$(go env CC)" >/dev/null 2>&1; then
  echo "note: no C compiler for cgo, so the race detector is off for this run"
  race=
fi

if [ "${1:-}" = fast ]; then
  shift
  pkgs=("$@")
  [ ${#pkgs[@]} -gt 0 ] || mapfile -t pkgs < <(changed_packages)
  if [ ${#pkgs[@]} -eq 0 ]; then echo "no changed Go package; name some: ./test.sh fast ./pkg/loop"; exit 0; fi
  phase "gofmt"
  unformatted=$(gofmt -l "${pkgs[@]}")
  [ -z "$unformatted" ] || { echo "gofmt would change:"; echo "$unformatted"; exit 1; }
  phase "go vet" "go vet $race ${pkgs[*]}"
  go vet $race "${pkgs[@]}"
  phase "go test" "go test -short $race ${pkgs[*]}"
  go test -short $race -count=1 "${pkgs[@]}"
  echo "== fast checks passed (CI runs everything: ./test.sh)"
  exit 0
fi

phase "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

phase "go vet" "go vet $race ./..."
go vet $race ./...


# Everything the tests run is built here, before any test starts a clock:
# on a fresh machine (empty module and build caches) this is the slow part,
# and each line it prints is a package being compiled.
phase build "build $race ./... (minutes on a fresh machine; quiet when the cache is warm)"
go build $race -v ./... 2>&1 | sed 's/^/  /'
# and what deploy's tests build as the Dockerfile does (static, -trimpath,
# so their copy of the tree hits this cache)
CGO_ENABLED=0 go build -trimpath -o /dev/null ./cmd/coordinator
CGO_ENABLED=0 go build -trimpath -o /dev/null ./cmd/toolworker
# and the commands the e2e tests run, once for both of the steps below
e2ebin=$(mktemp -d)
go build $race -o "$e2ebin" ./cmd/coordinator ./cmd/toolworker
go build -o "$e2ebin/mcptestserver" ./pkg/mcptool/mcptooltest/cmd/mcptestserver
go build -o "$e2ebin/sidefx" ./e2e/sidefx
export TOOLFLEET_E2E_BIN=$e2ebin
phase "nats CLI" "the nats CLI the tests drive (built once into the Go cache)"
go run ./internal/natscli/install
phase "chromium" "Chromium for the console's browser test (Debian's package, when missing)"
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  echo "  installed"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } ||
    echo "  note: chromium did not install; TestConsoleInABrowser will skip"
else
  echo "  note: not root with apt-get; TestConsoleInABrowser will skip (apt-get install chromium to run it)"
fi

# The tests, in two steps. Most tests wait (on processes, ack waits,
# deadlines, elections) rather than compute: run one package after another
# and a two-core machine sits mostly idle. So every package but ./e2e
# ($TESTP packages at a time) runs beside the e2e package's parallel tests
# (two at a time, as go test runs parallel tests on two cores). Then the
# e2e tests marked "// Not parallel:" run by themselves: the chaos and load
# tests keep both cores busy, and a few bound how long an answer takes.
# Each step's output is printed whole when it ends. On a machine loaded by
# other work, TESTP=1 (and E2E_BESIDE=0: the e2e package after the others,
# as a whole) trade time for headroom.
# The fuzz targets this run fuzzes (after the tests), chosen now so that
# their instrumented test binaries compile beside the tests. Which: every
# func FuzzX in a _test.go file, with its package directory, split into
# four quarters by position; a run fuzzes the quarter numbered by the
# commit count modulo 4, so four landings in a row fuzz every target, plus
# every target in a package the last commit changed (where new bugs are
# likeliest). Each target's seed corpus runs in every go test run. A run
# fuzzes a quarter for longer rather than all of them briefly because
# compiling an instrumented binary per package is most of the fuzz phase
# on a fresh machine.
targets= fuzzwarm=
if [ "$FUZZTIME" != "0" ]; then
  FUZZJOBS=${FUZZJOBS:-2}
  turn=$(( $(git rev-list --count HEAD 2>/dev/null || echo 0) % 4 ))
  touched=$(git diff --name-only HEAD~1 2>/dev/null | xargs -r -n1 dirname | sort -u | sed 's|^|./|')
  targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | sort | while read -r file; do
    grep -oE '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$(dirname "$file") |"
  done | awk -v turn="$turn" -v all="${FUZZALL:-}" -v touched="$touched" '
    BEGIN { n = split(touched, t, "\n"); for (i = 1; i <= n; i++) changed[t[i]] = 1 }
    all != "" || (NR - 1) % 4 == turn || ($1 in changed)')
  # The tests mostly wait (on processes, ack waits, deadlines): the
  # instrumented binaries compile meanwhile, one package at a time at the
  # lowest CPU priority, so the tests keep the cores when they need them
  # and a fresh machine's fuzz phase finds them built. Warm, each is a
  # cache hit and a link.
  set -m # in a process group of its own (the subshell leads it), so an early exit can stop it
  (echo "$targets" | sort -u -k1,1 | while read -r dir target; do
    nice -n 19 go test -c -o /dev/null -fuzz="^${target}\$" "$dir" >/dev/null 2>&1 || true
  done) &
  fuzzwarm=$!
  set +m
fi

TESTP=${TESTP:-3}
alone=$(awk '/^func / { name = "" } /^func Test/ { name = $2; sub(/\(.*/, "", name) }
  /^[[:space:]]*\/\/ Not parallel:/ && name != "" { print name }' e2e/*_test.go | sort -u | paste -sd'|' -)
[ -n "$alone" ] || alone='^$' # none marked: all run in the first step
others=$(go list ./... | grep -v '/e2e$')
if [ "${E2E_BESIDE:-1}" = 0 ]; then
  phase "go test" "go test $race ./... (all but ./e2e, $TESTP packages at a time)"
  go test $race -count=1 -timeout 20m -p "$TESTP" $others
  phase "go test e2e" "go test $race ./e2e"
  go test $race -count=1 -timeout 20m ./e2e
else
  phase "go test" "go test $race ./... ($TESTP packages at a time) beside go test $race ./e2e -skip '$alone'"
  e2elog=$(mktemp)
  set -m # the e2e step in a process group of its own, so an early exit can stop it
  go test $race -count=1 -timeout 20m -skip "^($alone)\$" ./e2e >"$e2elog" 2>&1 &
  e2epid=$!
  set +m
  status=0
  go test $race -count=1 -timeout 20m -p "$TESTP" $others || status=$?
  echo "   (and ./e2e's parallel tests, beside those:)"
  wait "$e2epid" || status=$?
  e2epid=
  sed 's/^/  /' "$e2elog"
  [ "$status" = 0 ] || exit "$status"
  phase "go test e2e" "go test $race ./e2e -run '$alone' (by themselves)"
  go test $race -count=1 -timeout 20m -run "^($alone)\$" ./e2e
fi

# fuzz_one DIR TARGET fuzzes one target for $FUZZTIME with one worker
# process, and prints what happened in one write (targets run $FUZZJOBS at
# a time, so their reports must not interleave). It fails on a finding.
fuzz_one() {
  local dir=$1 target=$2 log report status=0
  log=$(mktemp)
  report="-- $dir $target"
  if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -parallel=1 "$dir" >"$log" 2>&1; then
    :
  # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as
  # a failure when a worker is mid-input as time runs out
  # (go.dev/issue/75804, fixed in Go 1.27). A real finding always writes
  # its input and says so; a bare "context deadline exceeded" with no
  # input written, no panic and no test failure is that race, not a bug.
  elif grep -q 'context deadline exceeded' "$log" &&
    ! grep -qE 'Failing input written to|^panic:|_test\.go:[0-9]+:|fuzzing process hung' "$log"; then
    report+=$'\n'"   (the fuzz coordinator's own deadline race, go.dev/issue/75804; no input failed)"
  else
    report+=$'\n'"$(cat "$log")"$'\n'"fuzz target $target in $dir failed (crasher kept in $dir/testdata/fuzz)"
    status=1
  fi
  rm -f "$log"
  printf '%s\n' "$report"
  return $status
}

if [ "$FUZZTIME" != "0" ]; then
  phase fuzz "fuzz ($(echo "$targets" | grep -c .) targets: quarter $turn of 4 and the last commit's packages; each for $FUZZTIME, $FUZZJOBS at a time)"
  wait "$fuzzwarm" 2>/dev/null || true # the binaries still compiling
  fuzzwarm=
  export -f fuzz_one
  export FUZZTIME
  echo "$targets" | xargs -P "$FUZZJOBS" -L 1 bash -c 'fuzz_one "$@"' fuzz_one
fi
echo "== all tests passed"
