#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx) for FUZZTIME each (default 30s),
# one at a time (the fuzzer uses every core it is given; FUZZ_PARALLEL
# workers, default 1). `make test` already runs each target's seed corpus
# (testdata/fuzz/FuzzXxx plus its f.Add seeds); this explores beyond it.
# A failing input is written to the package's testdata/fuzz/FuzzXxx/ by
# the fuzzer: commit it with the fix, so it stays a regression test.
# Prints one line per target: package, target, time, result.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${FUZZTIME:=30s}"
: "${FUZZ_PARALLEL:=1}"
: "${FUZZ_MATCH:=.}"
fail=0
summary=()
for pkg in $(go list ./... ); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u)
  for t in $targets; do
    [[ "$t" =~ $FUZZ_MATCH ]] || continue
    log=$(mktemp)
    if go test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -parallel "$FUZZ_PARALLEL" "$pkg" >"$log" 2>&1; then
      res="ok ($(grep -o 'execs: [0-9]*' "$log" | tail -1), $(grep -o 'new interesting: [0-9]*' "$log" | tail -1))"
    elif grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
      # Go's fuzzer reports its own deadline when FUZZTIME ends during
      # baseline coverage (a very short FUZZTIME on a busy machine).
      res="ok (time ran out before fuzzing proper: raise FUZZTIME)"
    else
      res="FAILED: $(grep -m1 -A3 -- '--- FAIL' "$log" | tr '\n' ' ')"
      cat "$log" >&2
      fail=1
    fi
    rm -f "$log"
    line="${pkg#github.com/agentbox/agentbox/} $t $FUZZTIME $res"
    echo "$line"
    summary+=("$line")
  done
done
echo "fuzz: ${#summary[@]} targets, FUZZTIME=$FUZZTIME"
exit $fail
