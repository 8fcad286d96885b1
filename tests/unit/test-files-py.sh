#!/usr/bin/env bash
# Unit test of images/python/sandbox/files.py, the in-sandbox file mover, run with the host's
# python3 against a temporary workspace: round trips, path rules, stat, move and mkdir's created
# flag, and the hostile cases (planted symlinks, fifos, short and long uploads, moves into
# themselves or through links, a full tmpfs). TAP output.
#
# Needs: python3 (3.11+), jq, sha256sum. FILES_PY overrides the program's path (meson sets it).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
FILES_PY=${FILES_PY:-$here/../../images/python/sandbox/files.py}

T=$(mktemp -d)
WS=$T/ws            # the workspace
OUT=$T/outside      # stands for everything outside the workspace
SMALL=$T/small      # a 1 MiB tmpfs, when we may mount one
mkdir -p "$WS" "$OUT" "$T/in"
cleanup() {
    exec 7>&- 2>/dev/null
    umount "$SMALL" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
umask 022

# fp [-i INPUT] [-w WORKSPACE] ARGS...: runs files.py; stdout in $T/out, its answer line in $HDR
# (for put the line after {"ready":true}, $READY then 1), answer lines in $LINES, exit status in
# $RC.
fp() {
    local input=/dev/null ws=$WS
    while :; do
        case $1 in
        -i) input=$2; shift 2 ;;
        -w) ws=$2; shift 2 ;;
        *) break ;;
        esac
    done
    SANDPOOL_WORKSPACE=$ws timeout "${FP_TIMEOUT:-20}" python3 -I -S "$FILES_PY" "$@" \
        <"$input" >"$T/out" 2>"$T/err"
    RC=$?
    HDR=$(head -n1 "$T/out")
    LINES=$(wc -l <"$T/out")
    READY=0
    if [[ $1 == put && $HDR == '{"ready":true}' ]]; then
        # put announces that it reads stdin now; its answer is the line after.
        READY=1
        HDR=$(sed -n 2p "$T/out")
        LINES=$((LINES - 1))
    fi
}
j() { jq -r "$1" <<<"$HDR"; }
# The bytes after the JSON line.
body() { tail -c +$(($(head -n1 "$T/out" | wc -c) + 1)) "$T/out"; }
sha() { sha256sum | cut -d' ' -f1; }
parts() { find "$1" -name '*.sandpool-part-*' | wc -l; }
# check_err DESCRIPTION CODE [fp ARGS...]: exit 2 with that error code, one line, no traceback.
check_err() {
    local desc=$1 code=$2
    shift 2
    fp "$@"
    check_eq "$desc" "$RC $(j .error) $LINES $(wc -c <"$T/err")" "2 $code 1 0"
}

# --- put / get round trip --------------------------------------------------------------------
head -c 3145728 /dev/urandom >"$T/in/bin"
want=$(sha <"$T/in/bin")
fp -i "$T/in/bin" put data.bin 3145728
check_eq "put: exit 0, announced ready before reading" "$RC $READY" "0 1"
check_eq "put: path, size, sha256" "$(j '[.path, .size, .sha256] | join(" ")')" \
    "data.bin 3145728 $want"
check_eq "put: stored content" "$(sha <"$WS/data.bin")" "$want"
check_eq "put: mode 0644, regular file" "$(stat -c '%a %F' "$WS/data.bin")" "644 regular file"
check_eq "put: no part file left" "$(parts "$WS")" 0

fp get data.bin
check_eq "get: exit 0" "$RC" 0
check_eq "get: header" "$(j '[.path, .size, (.mtime | type)] | join(" ")')" \
    "data.bin 3145728 number"
check_eq "get: body is exactly the file" "$(body | wc -c) $(body | sha)" "3145728 $want"

printf '' >"$T/in/empty"
fp -i "$T/in/empty" put empty 0
check_eq "put: empty file" "$RC $(j .size) $(stat -c %s "$WS/empty")" "0 0 0"
fp get empty
check_eq "get: empty file, header only" "$RC $(j .size) $(wc -c <"$T/out")" "0 0 $((${#HDR} + 1))"

# --- nested put, normalised paths, mkdir -----------------------------------------------------
printf 'hello' >"$T/in/hello"
fp -i "$T/in/hello" put './a//b/./c.txt' 5
check_eq "put nested: normalised path" "$RC $(j .path)" "0 a/b/c.txt"
check_eq "put nested: parents created 0755" "$(stat -c %a "$WS/a" "$WS/a/b" | xargs)" "755 755"
check_eq "put nested: content" "$(cat "$WS/a/b/c.txt")" hello

fp mkdir x/y/z
check_eq "mkdir: nested" "$RC $(j .path) $(stat -c %a "$WS/x/y/z")" "0 x/y/z 755"
check_eq "mkdir: a new directory answers created true" "$(j .created)" true
fp mkdir x/y
check_eq "mkdir: existing directory is fine" "$RC $(j .path)" "0 x/y"
check_eq "mkdir: an existing directory answers created false" "$(j .created)" false
fp mkdir ./x//y/z/
check_eq "mkdir: the same, normalised, created false" "$RC $(j .path) $(j .created)" "0 x/y/z false"
check_err "mkdir: over a file is exists" exists mkdir a/b/c.txt

# --- list ------------------------------------------------------------------------------------
ln -s /etc/passwd "$WS/p"
fp list ''
check_eq "list root: path ''" "$RC $(j .path) $(j .truncated)" "0  false"
check_eq "list root: sorted names and types" \
    "$(j '[.entries[] | "\(.name):\(.type)"] | join(" ")')" \
    "a:dir data.bin:file empty:file p:symlink x:dir"
check_eq "list root: sizes, paths, mtimes" \
    "$(j '[.entries[] | "\(.path)=\(.size)/\(.mtime | type)"] | join(" ")')" \
    "a=0/number data.bin=3145728/number empty=0/number p=0/number x=0/number"
fp list .
check_eq "list '.': the root too" "$RC $(j .path) $(j '.entries | length')" "0  5"
printf 'xy' >"$WS/a/b/d.txt"
fp list a/b
check_eq "list subdir" \
    "$RC $(j .path) $(j '[.entries[] | "\(.name),\(.path),\(.type),\(.size)"] | join(" ")')" \
    "0 a/b c.txt,a/b/c.txt,file,5 d.txt,a/b/d.txt,file,2"
check_err "list of a file is not_dir" not_dir list data.bin
check_err "list of a missing dir is not_found" not_found list nope

# --- path rules ------------------------------------------------------------------------------
check_err "bad_path: .." bad_path get ../etc/passwd
check_err "bad_path: absolute" bad_path get /etc/passwd
check_err "bad_path: a/../b" bad_path get a/../data.bin
check_err "bad_path: empty" bad_path get ''
check_err "bad_path: put to ." bad_path -i "$T/in/hello" put . 5
check_err "bad_path: component > 255 bytes" bad_path get "$(printf 'n%.0s' {1..256})"
check_err "bad_path: delete the root" bad_path delete .
check_err "bad_path: delete ''" bad_path delete ''
check_err "not_dir: a file as a directory" not_dir get data.bin/x
check_err "not_found: missing file" not_found get nope
check_err "not_found: missing parent" not_found get nope/x
check_err "is_dir: get of a directory" is_dir get a
check_err "usage: bad SIZE" usage put f -1
check_err "usage: unknown op" usage chmod f
check_err "usage: missing argument" usage get

# --- symlinks and fifos planted by user code -------------------------------------------------
check_err "symlink: get of a link to /etc/passwd" symlink get p
check_eq "symlink: not one byte of /etc/passwd" "$(grep -c root: "$T/out")" 0
ln -s /etc "$WS/d"
check_err "symlink: a linked directory component" symlink get d/passwd
ln -s "$OUT" "$WS/out"
check_err "symlink: put through a linked directory" symlink -i "$T/in/hello" put out/x 5
check_err "symlink: put creating parents through a link" symlink -i "$T/in/hello" put out/n/x 5
check_eq "symlink: nothing written outside" "$(find "$OUT" | wc -l)" 1
check_err "symlink: mkdir through a link" symlink mkdir out/m
check_err "symlink: mkdir onto a link to a directory is exists" exists mkdir out
check_eq "symlink: mkdir made nothing outside" "$(find "$OUT" | wc -l)" 1
check_err "symlink: list through a link" symlink list out

printf 'orig' >"$OUT/target"
ln -s "$OUT/target" "$WS/l"
fp -i "$T/in/hello" put l 5
check_eq "put onto a symlink: replaces the link" "$RC $(stat -c %F "$WS/l") $(cat "$WS/l")" \
    "0 regular file hello"
check_eq "put onto a symlink: target unchanged" "$(cat "$OUT/target")" orig

mkfifo "$WS/f"
SECONDS=0
FP_TIMEOUT=5 check_err "fifo: get is not_file" not_file get f
check_eq "fifo: get does not block" "$((SECONDS < 5))" 1

# --- failed uploads leave nothing ------------------------------------------------------------
printf 'abc' >"$T/in/abc"
check_err "short upload is incomplete" incomplete -i "$T/in/abc" put inc.txt 10
check_eq "incomplete: no file, no part file" "$(test -e "$WS/inc.txt"; echo $?) $(parts "$WS")" \
    "1 0"
head -c 100 /dev/zero >"$T/in/100"
check_err "long upload is too_large" too_large -i "$T/in/100" put big.txt 10
check_eq "too_large: no file, no part file" "$(test -e "$WS/big.txt"; echo $?) $(parts "$WS")" \
    "1 0"
SECONDS=0
yes | SANDPOOL_WORKSPACE=$WS timeout 10 python3 -I -S "$FILES_PY" put endless 10 >"$T/out" 2>&1
HDR=$(tail -n1 "$T/out")
check_eq "too_large: endless stdin, prompt exit" "$(j .error) $((SECONDS < 5)) $(parts "$WS")" \
    "too_large 1 0"
printf 'hello' >"$WS/a/b/c.txt"
check_err "put onto a directory is is_dir" is_dir -i "$T/in/hello" put a/b 5
# shellcheck disable=SC2011 # the test's own file names (no blanks), on one line
check_eq "is_dir: directory untouched" "$(ls "$WS/a/b" | xargs) $(parts "$WS")" "c.txt d.txt 0"
check_eq "is_dir: refused before reading stdin" "$READY" 0
check_err "put into a file's 'directory' is not_dir" not_dir -i "$T/in/hello" put data.bin/x 5

# SIGTERM while waiting for stdin: the part file goes away with the process.
mkfifo "$T/pipe"
exec 7<>"$T/pipe"
SANDPOOL_WORKSPACE=$WS python3 -I -S "$FILES_PY" put sig.txt 100 <"$T/pipe" >/dev/null 2>&1 &
pid=$!
printf 'abc' >&7
one_part() { [ "$(parts "$WS")" = 1 ]; }
check "SIGTERM: part file exists while uploading" wait_for 5 one_part
kill -TERM "$pid"
wait "$pid"
rc=$?
exec 7>&-
check_eq "SIGTERM: exit 143, no file, no part file" \
    "$rc $(test -e "$WS/sig.txt"; echo $?) $(parts "$WS")" "143 1 0"

# Code in the sandbox removes the directory while an upload into it is under way: the answer is
# "gone" (the daemon's 409 conflict), not an I/O error, and nothing is left behind.
mkdir -p "$WS/race"
exec 7<>"$T/pipe"
SANDPOOL_WORKSPACE=$WS python3 -I -S "$FILES_PY" put race/f.txt 3 <"$T/pipe" >"$T/race.out" 2>&1 7>&- &
pid=$!
part_in_race() { [ "$(parts "$WS/race")" = 1 ]; }
wait_for 5 part_in_race
rm -rf "$WS/race"
printf 'abc' >&7
exec 7>&-
wait "$pid"
rc=$?
check_eq "a directory removed during an upload: exit 2, error 'gone'" \
    "$rc $(tail -n1 "$T/race.out" | jq -r .error)" "2 gone"

# --- stat ------------------------------------------------------------------------------------
fp stat a/b/c.txt
check_eq "stat file: path, name, type, size, mode" \
    "$RC $(j '[.path, .name, .type, .size, .mode] | join(" ")')" "0 a/b/c.txt c.txt file 5 420"
check_eq "stat file: mtime is the file's" "$(j '.mtime | floor')" "$(stat -c %Y "$WS/a/b/c.txt")"
chmod 600 "$WS/a/b/d.txt"
fp stat ./a//b/d.txt
check_eq "stat: normalised path, mode 0600" "$RC $(j .path) $(j .mode)" "0 a/b/d.txt 384"
fp stat a/b
check_eq "stat dir" "$RC $(j '[.path, .name, .type, .size, .mode] | join(" ")')" "0 a/b b dir 0 493"
roots=""
for r in '' . ./; do
    fp stat "$r"
    roots+="$RC:$(j .path):$(j .name):$(j .type) "
done
fp stat
roots+="$RC:$(j .path):$(j .name):$(j .type)"
check_eq "stat of the root ('', '.', './', no PATH)" "$roots" "0:::dir 0:::dir 0:::dir 0:::dir"
fp stat p
check_eq "stat a symlink to /etc/passwd: the link itself, not followed" \
    "$RC $(j '[.name, .type, .size] | join(" ")')" "0 p symlink 0"
fp stat out
check_eq "stat a symlink to a directory outside: the link itself" "$RC $(j .type)" "0 symlink"
check_err "stat through a linked directory is symlink" symlink stat d/passwd
check_err "stat through a link to outside is symlink" symlink stat out/target
SECONDS=0
FP_TIMEOUT=5 fp stat f
check_eq "stat a fifo: other, without blocking" "$RC $(j .type) $((SECONDS < 5))" "0 other 1"
check_err "stat missing is not_found" not_found stat nope
check_err "stat: missing parent is not_found" not_found stat nope/x
check_err "stat: a file as a directory is not_dir" not_dir stat data.bin/x
check_err "stat: '..' is bad_path" bad_path stat ../etc
check_err "stat: absolute is bad_path" bad_path stat /etc/passwd
check_err "stat: two paths is usage" usage stat a b

# --- move ------------------------------------------------------------------------------------
mkdir -p "$WS/mv/src/inner" "$WS/mv/full/x" "$WS/mv/empty"
printf 'one' >"$WS/mv/src/inner/one.txt"
printf 'f' >"$WS/mv/file.txt"
printf 'g' >"$WS/mv/g.txt"
fp move mv/file.txt ./mv//new/deeper/file2.txt
check_eq "move file: answers DST, normalised, its parents created 0755" \
    "$RC $LINES $(j .path) $(stat -c %a "$WS/mv/new" "$WS/mv/new/deeper" | xargs)" \
    "0 1 mv/new/deeper/file2.txt 755 755"
check_eq "move file: content moved, SRC gone" \
    "$(cat "$WS/mv/new/deeper/file2.txt") $(test -e "$WS/mv/file.txt"; echo $?)" "f 1"
fp move mv/src mv/dst
check_eq "move dir: its tree goes along, SRC gone" \
    "$RC $(j .path) $(cat "$WS/mv/dst/inner/one.txt") $(test -e "$WS/mv/src"; echo $?)" \
    "0 mv/dst one 1"
check_err "move of a missing SRC is not_found" not_found move mv/nope mv/made/x
check_eq "not_found: nothing of DST created" "$(test -e "$WS/mv/made"; echo $?)" 1
check_err "move from a missing directory is not_found" not_found move nope/x mv/made/x
check_err "move onto a non-empty directory is exists" exists move mv/dst mv/full
check_err "move a file onto a directory is exists" exists move mv/g.txt mv/empty
check_err "move a directory onto a file is exists" exists move mv/dst mv/g.txt
check_eq "exists: SRC and DST untouched" \
    "$(cat "$WS/mv/g.txt") $(cat "$WS/mv/dst/inner/one.txt") $(ls "$WS/mv/full")" "g one x"
check_eq "exists: the empty directory still empty" "$(find "$WS/mv/empty" -mindepth 1 | wc -l)" 0
fp move mv/new/deeper/file2.txt mv/g.txt
check_eq "move a file onto a file replaces it (rename(2))" \
    "$RC $(cat "$WS/mv/g.txt") $(test -e "$WS/mv/new/deeper/file2.txt"; echo $?)" "0 f 1"
fp move mv/dst mv/empty
check_eq "move a directory onto an empty directory replaces it (rename(2))" \
    "$RC $(cat "$WS/mv/empty/inner/one.txt") $(test -e "$WS/mv/dst"; echo $?)" "0 one 1"
check_err "move a directory into itself is bad_path" bad_path move mv/empty mv/empty/sub
check_err "move a directory deeper into itself is bad_path" bad_path move mv/empty mv/empty/n1/n2
E=$WS/mv/empty
check_eq "bad_path: nothing created inside it, nothing moved" \
    "$(test -e "$E/n1"; echo $?) $(test -e "$E/sub"; echo $?) $(cat "$E/inner/one.txt")" "1 1 one"
fp move mv/g.txt mv/g.txt
check_eq "move onto itself: left in place" "$RC $(cat "$WS/mv/g.txt")" "0 f"
fp move mv/empty mv/empty
check_eq "move a directory onto itself: left in place" "$RC $(cat "$WS/mv/empty/inner/one.txt")" \
    "0 one"
check_err "move: SRC '.' is bad_path" bad_path move . mv/x
check_err "move: SRC '' is bad_path" bad_path move '' mv/x
check_err "move: DST '' is bad_path" bad_path move mv/g.txt ''
check_err "move: DST with '..' is bad_path" bad_path move mv/g.txt ../g.txt
check_err "move: absolute SRC is bad_path" bad_path move /etc/passwd mv/passwd
check_err "move: absolute DST is bad_path" bad_path move mv/g.txt /tmp/g.txt
check_err "move: one argument is usage" usage move mv/g.txt
check_err "move: SRC under a file is not_dir" not_dir move data.bin/x mv/x
check_err "move: DST under a file is not_dir" not_dir move mv/g.txt mv/g.txt/x
check_err "move out of a linked directory is symlink" symlink move d/passwd mv/passwd
outside=$(find "$OUT" | wc -l)
check_err "move into a linked directory is symlink" symlink move mv/g.txt out/g.txt
check_err "move making parents through a link is symlink" symlink move mv/g.txt out/n/g.txt
check_eq "symlink: nothing moved outside, SRC kept" "$(find "$OUT" | wc -l) $(cat "$WS/mv/g.txt")" \
    "$outside f"
fp move p mv/p2
check_eq "move a symlink moves the link, not its target" \
    "$RC $(readlink "$WS/mv/p2") $(test -e "$WS/p" -o -L "$WS/p"; echo $?)" "0 /etc/passwd 1"
check_eq "move a symlink: /etc/passwd untouched" "$(test -s /etc/passwd; echo $?)" 0
fp move mv/p2 p
check_eq "and back" "$RC $(readlink "$WS/p")" "0 /etc/passwd"
rm -rf "$WS/mv"

# --- delete ----------------------------------------------------------------------------------
fp delete data.bin
check_eq "delete file" "$RC $(j .path) $(j .deleted) $(test -e "$WS/data.bin"; echo $?)" \
    "0 data.bin true 1"
fp delete p
check_eq "delete a link to /etc/passwd removes the link only" \
    "$RC $(test -e "$WS/p" -o -L "$WS/p"; echo $?) $(test -s /etc/passwd; echo $?)" "0 1 0"
mkdir -p "$OUT/keep" "$WS/a/b/deep/er"
printf 'k' >"$OUT/keep/file"
ln -s "$OUT/keep" "$WS/a/b/deep/link"
mkfifo "$WS/a/b/deep/er/fifo"
SECONDS=0
fp delete a
check_eq "delete dir recursively" "$RC $(j .deleted) $(test -e "$WS/a"; echo $?) $((SECONDS < 5))" \
    "0 true 1 1"
check_eq "delete dir: symlink target untouched" "$(cat "$OUT/keep/file")" k
fp delete out
check_eq "delete a link to a directory removes the link only" \
    "$RC $(test -L "$WS/out"; echo $?) $(test -d "$OUT"; echo $?)" "0 1 0"
check_err "delete missing is not_found" not_found delete a
check_eq "workspace root still there" "$(test -d "$WS"; echo $?)" 0

# --- a full tmpfs ----------------------------------------------------------------------------
if [ "$(id -u)" = 0 ] && mkdir -p "$SMALL" && mount -t tmpfs -o size=1m tmpfs "$SMALL" 2>/dev/null
then
    head -c 2097152 /dev/urandom >"$T/in/2m"
    check_err "full tmpfs is no_space" no_space -w "$SMALL" -i "$T/in/2m" put sub/big 2097152
    check_eq "no_space: refused before reading stdin" "$READY" 0
    check_eq "no_space: no file, no part file" \
        "$(test -e "$SMALL/sub/big"; echo $?) $(parts "$SMALL")" "1 0"
else
    ok "full tmpfs is no_space # SKIP needs root and mount"
    ok "no_space: refused before reading stdin # SKIP needs root and mount"
    ok "no_space: no leftovers # SKIP needs root and mount"
fi

tap_done
