# shellcheck shell=bash
# images/test.sh - sandpool/test:latest: the host's static busybox and one link per applet, a
# sandbox user, for fast tests. Sourced by images/build.sh. Its key: this script, the libs
# below, the busybox binary.

image_uses test common engine cache

readonly REPO_TEST=sandpool/test
readonly TEST_CMD='["/bin/sleep","2147483647"]'
BUSYBOX=
TEST_HASH=

test_inputs() {
  printf 'sandpool test v2\n'
  printf 'scripts %s\n' "$(image_scripts_sha test)"
  printf 'busybox %s\n' "$(sha256_of_file "$BUSYBOX")"
}

find_busybox() {
  local bb out
  bb=
  for bb in /bin/busybox /usr/bin/busybox; do
    [[ -x $bb ]] && break
    bb=
  done
  if [[ -z $bb ]]; then
    ensure_host_package busybox-static
    bb=$(command -v busybox) || die "busybox not found after installing busybox-static"
  fi
  # As moby's contrib/mkimage/busybox-static: it must be a static binary.
  out=$(LC_ALL=C ldd "$bb" 2>&1 || true)
  if [[ $out != *'not a dynamic executable'* ]]; then
    die "$bb is dynamically linked; install Debian's busybox-static (apt-get install busybox-static)"
  fi
  BUSYBOX=$bb
}

read -r -d '' TEST_CHECK_SH <<'EOF' || true
set -eu
test "$(id -u):$(id -g)" = 1000:1000 || { echo "uid/gid $(id -u):$(id -g)"; exit 1; }
for a in sh cat tar id head tee wc sha256sum ls sleep; do
  command -v "$a" >/dev/null || { echo "missing applet $a"; exit 1; }
done
echo hello | tee /workspace/f | wc -c | grep -qx '6'
sha256sum /workspace/f | head -c 64 | grep -q 5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03
tar -C /workspace -cf - f | tar -tf - | grep -qx f
ls / >/dev/null
cat /etc/passwd | grep -q '^sandbox:x:1000:1000:'
sleep 2147483647 &
pid=$!
sleep 1
kill -0 "$pid" || { echo "sleep 2147483647 exited early"; exit 1; }
kill "$pid"
echo "test image ok"
EOF
readonly TEST_CHECK_SH

build_test() {
  local rootfs="$WORK/test-rootfs" log="$LOGS/test.log" applet id
  step "test: rootfs from $BUSYBOX (log: $log)"
  mkdir -p "$rootfs"/{bin,etc,dev,proc,sys,root,tmp,workspace}
  install -m 0755 "$BUSYBOX" "$rootfs/bin/busybox"
  while IFS= read -r applet; do
    # --list-full also names bin/busybox itself and /linuxrc; skip both.
    case $applet in '' | bin/busybox | linuxrc) continue ;; esac
    mkdir -p "$rootfs/$(dirname "$applet")"
    ln -sf /bin/busybox "$rootfs/$applet"
  done < <("$rootfs/bin/busybox" --list-full)
  cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/workspace:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
  cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
EOF
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  chmod 0700 "$rootfs/root"
  chmod 1777 "$rootfs/tmp"
  chown 1000:1000 "$rootfs/workspace"
  chmod 0755 "$rootfs/workspace"
  step "test: importing"
  if ! id=$(tar --numeric-owner -C "$rootfs" -c . 2>>"$log" |
    engine_import --message "sandpool test image (busybox $(sha256_of_file "$BUSYBOX"))" \
      --change "ENV $IMAGE_PATH_ENV" --change 'WORKDIR /workspace' \
      --change 'USER 1000:1000' --change "CMD $TEST_CMD" \
      --change "LABEL $LABEL_KIND=test" --change "LABEL $LABEL_INPUTS=$TEST_HASH" \
      - 2>>"$log"); then
    [[ $id == sha256:* ]] && PENDING_IMAGES+=("$id")
    die "tar | docker import of the test image failed; log: $log"
  fi
  PENDING_IMAGES+=("$id")
  step "test: checking $id in a hardened container"
  run_check "$log" "test image check" run_container "$id" "${HARDENED_RUN[@]}" -- \
    sh -c "$TEST_CHECK_SH"
  tag_image "$id" "$REPO_TEST:$(short "$TEST_HASH")" "$REPO_TEST:latest"
  step "test: tagged $REPO_TEST:latest ($REPO_TEST:$(short "$TEST_HASH"))"
}

# image_test: builds sandpool/test:latest unless it is up to date.
image_test() {
  find_busybox
  TEST_HASH=$(test_inputs | sha256_of_stdin)
  if up_to_date "$REPO_TEST" "$TEST_HASH"; then
    step "test: $REPO_TEST:latest up to date ($(short "$TEST_HASH"))"
  else
    build_test
  fi
  prune_repo "$REPO_TEST" "$(short "$TEST_HASH")"
}
