#!/usr/bin/env bash
# Unit test of the shell suites' check helpers (tests/lib/tap.sh): each condition must fail on
# nothing: "", an empty file, whitespace, null/false where JSON is read, words where a number
# is, a missing file; and pass on a real value (lacks reads text: null and false are words
# there like any other). jq 1.6 with its -e option exits 0 on empty input, and awk reads "" as
# 0: checks built on them passed on an attack that printed nothing. TAP output.
#
# Needs: jq, awk, grep.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
: >"$T/empty"
printf ' \n\t\n' >"$T/blank"
echo null >"$T/null"
echo false >"$T/false"
echo '{"a": 1, "s": "x"}' >"$T/obj"
printf '{"a": 1}\n{"a": 2}\n' >"$T/two"
echo '{"a": 1' >"$T/broken"

# fails DESCRIPTION COMMAND...: ok when the command fails. passes: ok when it succeeds.
fails() {
    local desc=$1
    shift
    if "$@"; then not_ok "$desc fails"; else ok "$desc fails"; fi
}
passes() { check "$1 passes" "${@:2}"; }

# TAP results of a nested tap.sh, counted: check_eq and friends print their own lines.
# inner COMMAND...: runs the command in a subshell with fresh TAP counters, prints its TAP_FAILED.
# shellcheck disable=SC2034 # the counters of tap.sh, in the subshell
inner() { (TAP_N=0 TAP_FAILED=0; "$@" >/dev/null; echo "$TAP_FAILED"); }

# ---- jq_true ----------------------------------------------------------------------------------------
fails 'jq_true . on ""' eval 'jq_true . <<<""'
fails 'jq_true . on no input at all (printf "")' eval 'printf "" | jq_true .'
fails 'jq_true . on an empty file' jq_true . "$T/empty"
fails 'jq_true . on whitespace (file)' jq_true . "$T/blank"
fails 'jq_true . on whitespace (stdin)' eval 'printf " \n\t " | jq_true .'
fails 'jq_true . on null' jq_true . "$T/null"
fails 'jq_true . on false' jq_true . "$T/false"
fails 'jq_true on a missing file' jq_true . "$T/none"
fails 'jq_true on broken JSON' jq_true . "$T/broken"
fails 'jq_true on words' eval 'jq_true . <<<"not json"'
fails 'jq_true .a == 1 on ""' eval 'jq_true ".a == 1" <<<""'
fails 'jq_true with a filter that gives no output (empty)' jq_true 'empty' "$T/obj"
fails 'jq_true with a filter that selects nothing' jq_true '.[] | select(. == 99)' "$T/obj"
fails 'jq_true with a filter that is false' jq_true '.a == 2' "$T/obj"
fails 'jq_true with a filter that is null' jq_true '.missing' "$T/obj"
fails 'jq_true with a filter that errors' jq_true '.s | test(1)' "$T/obj"
fails 'jq_true when the last of several outputs is false' jq_true '.a == 1' "$T/two"
fails 'jq_true --arg on an empty file' jq_true --arg v x '.s == $v' "$T/empty"
fails 'jq_true --arg with a value that differs' jq_true --arg v y '.s == $v' "$T/obj"
passes 'jq_true . on an object' jq_true . "$T/obj"
passes 'jq_true .a == 1 on an object' jq_true '.a == 1' "$T/obj"
passes 'jq_true on stdin' eval 'jq_true ".a == 1" <"$T/obj"'
passes 'jq_true on a here-string' eval 'jq_true ".a == 1" <<<"{\"a\": 1}"'
passes 'jq_true with a filter holding a pipe' jq_true '.a | . + 1 | . == 2' "$T/obj"
passes 'jq_true --arg' jq_true --arg v x '.s == $v' "$T/obj"
passes 'jq_true --argjson' jq_true --argjson n 1 '.a == $n' "$T/obj"
passes 'jq_true when the last of several outputs is true' jq_true '.a == 2' "$T/two"
passes 'jq_true with several files' jq_true '.a == 1' "$T/two" "$T/obj"
passes 'jq_true on 0 and "" (true for jq too)' eval 'jq_true ". == 0" <<<0 && jq_true . <<<"\"\""'

# ---- jq_true_s (slurp) ----------------------------------------------------------------------------
fails 'jq_true_s . on an empty file (not [])' jq_true_s . "$T/empty"
fails 'jq_true_s length == 0 on an empty file (no [] from nothing)' jq_true_s 'length == 0' "$T/empty"
fails 'jq_true_s on ""' eval 'jq_true_s . <<<""'
fails 'jq_true_s on whitespace' jq_true_s . "$T/blank"
fails 'jq_true_s .[0] on null' jq_true_s '.[0]' "$T/null"
fails 'jq_true_s .[0] on false' jq_true_s '.[0]' "$T/false"
fails 'jq_true_s on a missing file' jq_true_s . "$T/none"
fails 'jq_true_s on broken JSON' jq_true_s . "$T/broken"
fails 'jq_true_s with a filter that is false' jq_true_s 'length == 3' "$T/two"
fails 'jq_true_s with a filter that gives no output' jq_true_s '.[] | select(.a == 9)' "$T/two"
fails 'jq_true_s --arg on an empty file' jq_true_s --arg v x 'any(.[]; .s == $v)' "$T/empty"
passes 'jq_true_s length == 2' jq_true_s 'length == 2' "$T/two"
passes 'jq_true_s any() with --arg' jq_true_s --argjson n 2 'any(.[]; .a == $n)' "$T/two"
passes 'jq_true -s, the same' jq_true -s 'length == 2' "$T/two"
passes 'jq_true_s on stdin' eval 'jq_true_s "length == 2" <"$T/two"'

# ---- numbers ----------------------------------------------------------------------------------------
for v in "" " " null false abc 1x "1 2" - . 1e; do
    fails "is_num '$v'" is_num "$v"
done
for v in 0 42 -3 +7 1.5 .5 3. 1e3 2.5E-2; do
    passes "is_num '$v'" is_num "$v"
done
fails 'num_le "" 5 (awk would read 0)' num_le "" 5
fails 'num_le 5 ""' num_le 5 ""
fails 'num_le "" ""' num_le "" ""
fails 'num_le " " 5' num_le " " 5
fails 'num_le null 5' num_le null 5
fails 'num_le false 5' num_le false 5
fails 'num_le abc 5' num_le abc 5
fails 'num_le 6 5' num_le 6 5
passes 'num_le 5 5' num_le 5 5
passes 'num_le 1.5 10' num_le 1.5 10
passes 'num_le 9.5 10 (numbers, not strings)' num_le 9.5 10
fails 'num_lt "" 5' num_lt "" 5
fails 'num_lt null 5' num_lt null 5
fails 'num_lt 5 5' num_lt 5 5
passes 'num_lt 4 5' num_lt 4 5
passes 'num_lt 100 1000 (numbers, not strings)' num_lt 100 1000
fails 'worst of an empty list' worst
fails 'worst of ""' worst ""
fails 'worst of " "' worst " "
fails 'worst of a list holding null' worst 1 null 3
fails 'worst of a list holding false' worst 1 false
fails 'worst of a list holding a word' worst 1 abc
fails 'median of an empty list' median
fails 'median of ""' median ""
fails 'median of a list holding null' median 1 null 3
fails 'median of a list holding a word' median 2 x
fails 'median of " "' median " "
fails 'median of a list holding false' median false 1
check_eq "worst 3 10 2.5 is 10" "$(worst 3 10 2.5)" 10
check_eq "median 3 10 2.5 is 3" "$(median 3 10 2.5)" 3
check_eq "median 4 1 3 2 is 2 (the lower middle)" "$(median 4 1 3 2)" 2
check_eq "worst of an empty list prints nothing" "[$(worst)]" "[]"
check_eq "median of an empty list prints nothing" "[$(median)]" "[]"

# ---- lacks ------------------------------------------------------------------------------------------
printf 'one\ntwo\n' >"$T/lines"
fails 'lacks on an empty file' lacks x "$T/empty"
fails 'lacks on a missing file' lacks x "$T/none"
fails 'lacks without a file' lacks x
fails 'lacks when a line matches' lacks two "$T/lines"
fails 'lacks -E when a line matches' lacks -E 'x|tw' "$T/lines"
fails 'lacks -F -e -e when one matches' lacks -F -e nope -e one "$T/lines"
passes 'lacks when no line matches' lacks three "$T/lines"
passes 'lacks -E when no line matches' lacks -E 'x|y' "$T/lines"
passes 'lacks -F -e -e when none matches' lacks -F -e nope -e 'o.e' "$T/lines"
fails 'lacks on whitespace' lacks x "$T/blank"

# ---- check_eq and check_empty -------------------------------------------------------------------------
check_eq 'check_eq "" "" is a failure' "$(inner check_eq d "" "")" 1
check_eq 'check_eq x "" is a failure' "$(inner check_eq d x "")" 1
check_eq 'check_eq "" x is a failure' "$(inner check_eq d "" x)" 1
check_eq 'check_eq null x is a failure' "$(inner check_eq d null x)" 1
check_eq 'check_eq x x passes' "$(inner check_eq d x x)" 0
check_eq 'check_empty x is a failure' "$(inner check_empty d x)" 1
check_eq 'check_empty " " is a failure' "$(inner check_empty d " ")" 1
check_eq 'check_empty "" passes' "$(inner check_empty d "")" 0
check_eq 'check on a false command is a failure' "$(inner check d false)" 1
check_eq 'check on a jq_true of nothing is a failure' "$(inner check d jq_true . "$T/empty")" 1

tap_done
