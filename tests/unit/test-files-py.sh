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
    "a=0/number data.bin=3145728/number empty=0/number p=11/number x=0/number"
check_eq "list root: a symlink's entry says what it resolves to (the link's size is its own)" \
    "$(j '[.entries[] | select(.type == "symlink") | .name, .target, .target_type] | join(" ")')" \
    "p /etc/passwd file"
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
    "$RC $(j '[.name, .type, .size] | join(" ")')" "0 p symlink 11"
check_eq "... what it resolves to, as E2B's envd says: /etc/passwd, a file, its mode" \
    "$(j '[.target, .target_type, .target_mode] | join(" ")')" "/etc/passwd file $((8#$(stat -c %a /etc/passwd)))"
fp stat out
check_eq "stat a symlink to a directory outside: the link itself" "$RC $(j .type)" "0 symlink"
check_eq "... resolving to that directory" "$(j '[.target, .target_type] | join(" ")')" "$OUT dir"
ln -s a/b/d.txt "$WS/in"
ln -s in "$WS/chain"
ln -s nowhere "$WS/dangling"
ln -s loop2 "$WS/loop1"
ln -s loop1 "$WS/loop2"
links=""
for l in in chain dangling loop1; do
    fp stat "$l"
    links+="$RC:$(j '[.type, .target, .target_type, .target_mode] | join(",")') "
done
check_eq "symlinks inside the workspace: the target relative to it, through a chain; a dangling link and a loop name themselves, missing" \
    "$links" "0:symlink,a/b/d.txt,file,384 0:symlink,a/b/d.txt,file,384 0:symlink,dangling,missing,0 0:symlink,loop1,missing,0 "
fp stat a/b/d.txt
check "a regular file has no target" test "$RC $(j 'has("target")')" = "0 false"
rm -f "$WS/in" "$WS/chain" "$WS/dangling" "$WS/loop1" "$WS/loop2"
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

# --- tar and untar (snapshots) ---------------------------------------------------------------
# tar of a workspace and of the kernel's snapshot directory, then untar (in put's frames) into
# an empty workspace; hostile archives made with Python's tarfile; a file swapped for a symlink
# while tar runs. Each side has its own SANDPOOL_SNAPSHOT_DIR under its own "/tmp".
SW=$T/snap-ws SW2=$T/snap-ws2 SD=$T/snap-tmp/.sandpool/snapshot SD2=$T/snap-tmp2/.sandpool/snapshot
mkdir -p "$SW/a/b/c" "$SW/empty" "$SW/modes" "$SD" "$SW2" "$T/snap-tmp2"
head -c 300000 /dev/urandom >"$SW/a/b/c/blob.bin"
head -c 70000 /dev/urandom >"$SW/a/bin2"
printf 'top\n' >"$SW/top.txt"
printf '' >"$SW/a/zero"
printf 'odd' >"$SW/a/$(printf 'n\xffme')"
ln -s ../top.txt "$SW/a/up"
ln -s b/c "$SW/a/down"
ln -s /etc/passwd "$SW/abs"       # left out: untar would refuse it
ln -s ../../x "$SW/a/out"         # likewise
mkfifo "$SW/a/fifo"
printf 'p' >"$SW/a/.blob.sandpool-part-0123456789abcdef"
printf 'm' >"$SW/modes/ro"
chmod 400 "$SW/modes/ro"
chmod 750 "$SW/modes"
printf '{"v":1}' >"$SD/manifest.json"
head -c 5000 /dev/urandom >"$SD/0.pkl"

# frame [--cut N] [--open]: stdin as put's upto frames on stdout (64 KiB each, then the empty
# frame); --cut N: only the first N bytes; --open: no end frame (stdin cut short).
cat >"$T/frame.py" <<'PY'
import struct, sys
args, data = sys.argv[1:], sys.stdin.buffer.read()
if "--cut" in args:
    data = data[:int(args[args.index("--cut") + 1])]
out = sys.stdout.buffer
for i in range(0, len(data), 65536):
    out.write(struct.pack(">I", len(data[i:i + 65536])) + data[i:i + 65536])
if "--open" not in args:
    out.write(struct.pack(">I", 0))
PY
frame() { python3 "$T/frame.py" "$@"; }
# tarp WS SNAPDIR OP ARGS...: files.py with that workspace and snapshot directory; output in
# $T/tout, exit status in $RC, the first line in $HDR, the last line in $LAST.
tarp() {
    local ws=$1 sd=$2
    shift 2
    SANDPOOL_WORKSPACE=$ws SANDPOOL_SNAPSHOT_DIR=$sd timeout 30 python3 -I -S "$FILES_PY" "$@" \
        <"${TAR_IN:-/dev/null}" >"$T/tout" 2>"$T/terr"
    RC=$?
    HDR=$(head -n1 "$T/tout")
    LAST=
    if [ "$1" != tar ]; then LAST=$(tail -n1 "$T/tout"); fi
}
# The tree under a directory: path, type, mode, size, link target; sorted.
# (A directory's size is the file system's business: left out.)
tree_of() {
    (cd "$1" && { find . -mindepth 1 -type d -printf '%P d %m\n'
        find . -mindepth 1 ! -type d -printf '%P %y %m %s %l\n'; } | LC_ALL=C sort)
}
sums_of() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }

tarp "$SW" "$SD" tar
check_eq "tar: exit 0, the header line first" "$RC $HDR" '0 {"tar":true}'
tail -c +14 "$T/tout" >"$T/snap.tar"
check_eq "tar: a tar stream GNU tar reads, nothing on stderr" \
    "$(tar -tf "$T/snap.tar" >"$T/members" 2>&1; echo $?) $(wc -c <"$T/terr")" "0 0"
check_eq "tar: globals/ first, then workspace/, each directory before what it holds" \
    "$(head -n2 "$T/members" | xargs) $(grep -n '^workspace/a/$' "$T/members" | cut -d: -f1) \
$(grep -n '^workspace/a/b/c/blob.bin$' "$T/members" | cut -d: -f1)" \
    "globals/0.pkl globals/manifest.json 3 6"
check_empty "tar: no fifo, part file, absolute or escaping symlink" \
    "$(grep -E 'fifo|sandpool-part|^workspace/abs$|^workspace/a/out$' "$T/members")"

frame <"$T/snap.tar" >"$T/snap.framed"
mkdir -p "$SD2"
printf 'stale' >"$SD2/stale.pkl"
TAR_IN=$T/snap.framed tarp "$SW2" "$SD2" untar 100000000
check_eq "untar: exit 0, ready first, then files, bytes, globals" "$RC $HDR $LAST" \
    '0 {"ready":true} {"files":6,"bytes":375015,"globals":2}'
rm -f "$SW/abs" "$SW/a/out" "$SW/a/fifo" "$SW/a/.blob.sandpool-part-0123456789abcdef"
check_eq "untar: the same tree (types, modes, sizes, link targets)" \
    "$(tree_of "$SW2" | sha)" "$(tree_of "$SW" | sha)"
check_eq "untar: the same bytes" "$(sums_of "$SW2" | sha)" "$(sums_of "$SW" | sha)"
check_eq "untar: the globals replace what was in the snapshot directory (0700)" \
    "$(cd "$SD2" && echo *) $(cmp "$SD/0.pkl" "$SD2/0.pkl" && echo same) $(stat -c %a "$SD2")" \
    "0.pkl manifest.json same 700"
check_eq "untar: symlinks as links" "$(readlink "$SW2/a/up") $(readlink "$SW2/a/down")" \
    "../top.txt b/c"
check_eq "untar: no part file left" "$(parts "$SW2")" 0

# Hostile archives, made with tarfile: each refused with its error, nothing outside.
mkdir -p "$T/hostile/outside" "$T/hostile/tmp"
cat >"$T/mk.py" <<'PY'
import io, sys, tarfile

kind, out = sys.argv[1], sys.stdout.buffer
tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)


def add(name, data=b"x", **attrs):
    info = tarfile.TarInfo(name)
    info.size = len(data) if attrs.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if info.size else None)


add("workspace/ok.txt", b"fine")
if kind == "dotdot":
    add("workspace/../x")
elif kind == "dotdot2":
    add("../x")
elif kind == "absolute":
    add("/etc/x")
elif kind == "empty":
    add("")
elif kind == "other-root":
    add("etc/passwd")
elif kind == "escape":
    add("workspace/esc", type=tarfile.SYMTYPE, linkname="../outside")
    add("workspace/esc/f")
elif kind == "abs-link":
    add("workspace/esc", type=tarfile.SYMTYPE, linkname=sys.argv[2])
elif kind == "climb":  # lexically inside, but through a symlink it climbs out
    add("workspace/d", type=tarfile.DIRTYPE, mode=0o755)
    add("workspace/d/up", type=tarfile.SYMTYPE, linkname="..")
    add("workspace/l", type=tarfile.SYMTYPE, linkname="d/up/..")
elif kind == "through":
    add("workspace/sub", type=tarfile.DIRTYPE, mode=0o755)
    add("workspace/in", type=tarfile.SYMTYPE, linkname="sub")
    add("workspace/in/f")
elif kind == "hardlink":
    add("workspace/h", type=tarfile.LNKTYPE, linkname="workspace/ok.txt")
elif kind == "device":
    add("workspace/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
elif kind == "fifo":
    add("workspace/p", type=tarfile.FIFOTYPE)
elif kind == "globals-dir":
    add("globals/sub/x")
elif kind == "modes":
    add("workspace/suid", mode=0o6755)
    add("workspace/sticky", type=tarfile.DIRTYPE, mode=0o1777)
    add("workspace/locked", type=tarfile.DIRTYPE, mode=0o500)
    add("workspace/locked/in", b"inside", mode=0o644)
elif kind == "huge":  # a header that claims 2 GiB, then a little data and no end
    info = tarfile.TarInfo("workspace/big")
    info.size = 2 << 30
    out.write(info.tobuf(tarfile.PAX_FORMAT) + b"y" * 4096)
    sys.exit(0)
elif kind == "big-pax":
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, 2 << 20
    out.write(info.tobuf(tarfile.USTAR_FORMAT) + b"9" * (2 << 20))
    sys.exit(0)
elif kind == "junk":
    tar.close()
    out.write(b"\1" * 512)
    sys.exit(0)
tar.close()
PY
mk() { python3 "$T/mk.py" "$@"; }
# hostile DESCRIPTION CODE KIND [ARGS]: untar of that archive into a fresh workspace: exit 2
# with CODE, one error line after the ready line, nothing outside the workspace. The workspace
# is $HWS.
hostile() {
    local desc=$1 code=$2
    shift 2
    HWS=$(mktemp -d "$T/hostile/ws.XXXXXX")
    mk "$@" | frame >"$T/h.framed"
    TAR_IN=$T/h.framed tarp "$HWS" "$T/hostile/tmp/.sandpool/snapshot" untar 1048576
    check_eq "$desc" "$RC $HDR $(jq -r .error <<<"$LAST") $(wc -l <"$T/tout") \
$(find "$T/hostile/outside" -mindepth 1 | wc -l) $(test -e "$T/x" -o -e "$T/hostile/x"; echo $?)" \
        "2 {\"ready\":true} $code 2 0 1"
}
hostile "untar: workspace/../x is bad_archive" bad_archive dotdot
hostile "untar: ../x is bad_archive" bad_archive dotdot2
hostile "untar: /etc/x is bad_archive" bad_archive absolute
hostile "untar: an empty name is bad_archive" bad_archive empty
hostile "untar: a member neither under workspace/ nor globals/ is bad_archive" bad_archive \
    other-root
hostile "untar: a symlink out of the workspace, then a file through it, is bad_archive" \
    bad_archive escape
check_empty "untar: nothing written through it" "$(ls -A "$T/hostile/outside")"
hostile "untar: an absolute symlink is bad_archive" bad_archive abs-link "$T/hostile/outside"
hostile "untar: a symlink whose '..' climbs through another symlink is bad_archive" \
    bad_archive climb
hostile "untar: a file through a symlink inside the workspace is bad_archive" bad_archive through
check_eq "untar: nothing written into the link's target" "$(find "$HWS/sub" -mindepth 1 | wc -l)" 0
hostile "untar: a hard link is bad_archive" bad_archive hardlink
hostile "untar: a device is bad_archive" bad_archive device
hostile "untar: a fifo is bad_archive" bad_archive fifo
hostile "untar: a directory in globals/ is bad_archive" bad_archive globals-dir
hostile "untar: junk after the end of the archive is bad_archive" bad_archive junk
hostile "untar: a pax header of 2 MiB is bad_archive" bad_archive big-pax
SECONDS=0
hostile "untar: a member that claims 2 GiB, over MAX, is too_large" too_large huge
check_eq "too_large: refused at its header, at once" "$((SECONDS < 5))" 1
python3 "$T/mk.py" modes >"$T/modes.tar"
ws=$(mktemp -d "$T/hostile/ws.XXXXXX")
for cut in open closed; do
    if [ $cut = open ]; then frame --cut 1100 --open; else frame --cut 1100; fi \
        <"$T/modes.tar" >"$T/h.framed"
    TAR_IN=$T/h.framed tarp "$ws" "$T/hostile/tmp/.sandpool/snapshot" untar 1048576
    printf '%s ' "$RC:$(jq -r .error <<<"$LAST")"
done >"$T/cuts"
check_eq "untar: a stream cut short is incomplete; a tar cut short but framed is bad_archive" \
    "$(cat "$T/cuts")" "2:incomplete 2:bad_archive "
check_eq "untar: cut streams leave no part file" "$(parts "$ws")" 0
frame <"$T/modes.tar" >"$T/h.framed"
ws=$(mktemp -d "$T/hostile/ws.XXXXXX")
TAR_IN=$T/h.framed tarp "$ws" "$T/hostile/tmp/.sandpool/snapshot" untar 1048576
check_eq "untar: modes masked to 0777 (no setuid, setgid, sticky), a read-only directory filled \
then made read-only" \
    "$RC $(stat -c %a "$ws/suid" "$ws/sticky" "$ws/locked" | xargs) $(cat "$ws/locked/in")" \
    "0 755 777 500 inside"
chmod 700 "$ws/locked"
check_err "untar: MAX not a number is usage" usage untar -1

# tar while user code swaps a file for a symlink to a secret outside (and for a fifo): never
# followed, never blocked; each run complete (0) or dropped (3).
mkdir -p "$T/race-ws/d" "$T/race-tmp"
printf 'SECRET' >"$OUT/secret"
(
    cd "$T/race-ws/d" || exit
    end=$((SECONDS + 30))
    while [ "$SECONDS" -lt "$end" ]; do
        printf 'plain' >f.new && mv -Tf f.new f
        ln -sf "$OUT/secret" f.lnk && mv -Tf f.lnk f
        ln -sf ../../outside/secret f.lnk && mv -Tf f.lnk f
        rm -f f.fifo && mkfifo f.fifo && mv -Tf f.fifo f
    done
) &
racer=$!
bad="" SECONDS=0
for _ in $(seq 1 40); do
    tarp "$T/race-ws" "$T/race-tmp/.sandpool/snapshot" tar
    if grep -q SECRET "$T/tout" || { [ "$RC" != 0 ] && [ "$RC" != 3 ]; }; then bad+="$RC "; fi
done
kill "$racer" 2>/dev/null
wait "$racer" 2>/dev/null
check_empty "tar while a file is swapped for symlinks and a fifo: never followed (40 runs)" "$bad"
check_eq "tar under that race never blocks" "$((SECONDS < 60))" 1

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
