# shellcheck shell=bash disable=SC2154 # tmp, pass and fail are the caller's
# The static checks (sourced, not run): tests/run.sh runs them first, and tests/quick.sh too.
# They need no build. The caller defines pass NAME and fail NAME (one result each) and $tmp, a
# scratch directory; SANDPOOL_ROOT is the checkout (deploy/local/lib.sh sets it).

# The Debian packages they run (tests/run.sh and tests/quick.sh install them).
# shellcheck disable=SC2034 # the callers' (ensure_packages)
SANDPOOL_STATIC_PACKAGES=(git shellcheck python3-pyflakes clang-format)

static_checks() {
    local hits files
    hits=$(cd "$SANDPOOL_ROOT" && git ls-files 'src/*.c' 'src/*.h' 'cmd/*.c' 'include/*.h' |
        xargs grep -nE '\b(strcpy|strcat|sprintf|vsprintf|strtok|gets|atoi|atol|atoll|strtol|strtoll|strtoul|strtoull|strtoimax|strtoumax|sscanf)\s*\(' |
        grep -v '^\S*:\s*/\*' || true)
    if [ -z "$hits" ]; then pass "static: no banned functions"; else echo "$hits"; fail "static: banned functions"; fi
    # jq 1.6 with its -e option exits 0 on empty input: a check built on it passes on nothing.
    # The shell suites use tap.sh's jq_true, which fails there: jq's -e (also -se, -es,
    # --exit-status) anywhere under tests/ but in tap.sh itself fails the run.
    hits=$(cd "$SANDPOOL_ROOT" &&
        grep -rnIE '\bjq(\s+--arg(json)?\s+\S+\s+\S+|\s+-[-a-zA-Z]+)*\s+(-[a-zA-Z]*e[a-zA-Z]*|--exit-status)\b' tests |
        grep -v '^tests/lib/tap\.sh:' || true)
    if [ -z "$hits" ]; then
        pass "static: no jq exit-status checks in tests/ outside tap.sh (jq_true)"
    else
        echo "$hits"
        fail "static: jq's -e in tests/ (it passes on empty input: use jq_true from tests/lib/tap.sh)"
    fi
    # The repository stands on its own: what a comment or doc cites under docs/ exists, and
    # nothing cites the team's notes outside it.
    hits=$(cd "$SANDPOOL_ROOT" &&
        { git grep -nE 'STYLE\.md|docker-engine\.md|agent-protocols\.md' -- . ':!tests/lib/static-checks.sh' || true
          git grep -ohE 'docs/[A-Za-z0-9_/.-]+\.md' -- . | sort -u | while read -r d; do
              [ -f "$d" ] || echo "cited, missing: $d"; done; })
    if [ -z "$hits" ]; then
        pass "static: every document cited is in the repository"
    else
        echo "$hits"
        fail "static: documents cited that are not in the repository"
    fi
    # Rooms a newcomer can read (docs/internals/style.md §1): no function body over 100
    # lines, no source file over 700 (the images' Python too: the file rule only). A C function
    # starts at its name in column 0 and its body runs from the "{" to the "}" in column 0 (the
    # house layout; clang-format keeps it).
    hits=$(cd "$SANDPOOL_ROOT" && git ls-files 'src/*.c' 'cmd/*.c' 'images/*.py' | xargs awk '
        FNR == 1 { name = ""; start = 0; c = FILENAME ~ /\.c$/
                   if (NR > 1 && last > 700) printf "%s: %d lines\n", prev, last }
        { prev = FILENAME; last = FNR }
        c && /^[A-Za-z_][A-Za-z0-9_]*\(/ { name = $0; sub(/\(.*/, "", name) }
        c && /^\{/ { start = FNR }
        /^\}/ && start { n = FNR - start - 1; start = 0
                         if (n > 100) printf "%s:%d: %s() is %d lines\n", FILENAME, FNR, name, n }
        END { if (last > 700) printf "%s: %d lines\n", prev, last }')
    if [ -z "$hits" ]; then
        pass "static: no function over 100 lines, no source file over 700"
    else
        echo "$hits"
        fail "static: functions over 100 lines or source files over 700"
    fi
    # The module rules of docs/internals/architecture.md: no module includes what they forbid
    # (a protocol another protocol, the HTTP core a protocol, a module below the edge the edge).
    if (cd "$SANDPOOL_ROOT" && python3 tests/static/check-includes.py) >"$tmp/includes.out" 2>&1; then
        pass "static: module includes follow docs/internals/architecture.md"
    else
        head -40 "$tmp/includes.out"
        fail "static: module includes (tests/static/check-includes.py)"
    fi
    # Every shell script (git's *.sh and the files whose first line runs sh or bash: .ci/run), at
    # warning level, following what each sources (.shellcheckrc says the same to an editor).
    files=$(cd "$SANDPOOL_ROOT" && git ls-files -z | while IFS= read -r -d '' f; do
        [ -f "$f" ] || continue
        case $f in
            *.sh) echo "$f" ;;
            *) head -n 1 "$f" 2>/dev/null | grep -qE '^#!.*[/ ](ba)?sh( |$)' && echo "$f" ;;
        esac
    done)
    # shellcheck disable=SC2086 # one argument per file (the repository's names have no blanks)
    if [ -n "$files" ] && (cd "$SANDPOOL_ROOT" && shellcheck -x -P SCRIPTDIR -S warning $files) \
        >"$tmp/shellcheck.out" 2>&1; then
        pass "static: shellcheck -S warning ($(echo "$files" | wc -l) scripts)"
    else
        head -60 "$tmp/shellcheck.out"
        fail "static: shellcheck -S warning"
    fi
    # The Python that runs in the images: it compiles (the bytecode goes to $tmp, not the tree)
    # and pyflakes finds nothing.
    files=$(cd "$SANDPOOL_ROOT" && git ls-files 'images/*.py')
    # shellcheck disable=SC2086 # as above
    if [ -n "$files" ] && (cd "$SANDPOOL_ROOT" && PYTHONPYCACHEPREFIX=$tmp/pycache \
        python3 -m py_compile $files && pyflakes3 $files) >"$tmp/python.out" 2>&1; then
        pass "static: py_compile and pyflakes on images/ ($(echo "$files" | wc -l) files)"
    else
        head -40 "$tmp/python.out"
        fail "static: py_compile and pyflakes on images/"
    fi
    files=$(cd "$SANDPOOL_ROOT" && git ls-files '*.c' '*.h')
    if (cd "$SANDPOOL_ROOT" && clang-format --dry-run -Werror $files) >"$tmp/format.out" 2>&1; then
        pass "static: clang-format"
    else
        head -40 "$tmp/format.out"
        fail "static: clang-format (run: clang-format -i \$(git ls-files '*.c' '*.h'))"
    fi
}
