# shellcheck shell=bash
# images/lib/cache.sh - what an image's cache key is made of and when a build is skipped: the
# hash of the scripts an image uses, a canonical listing of a build context, the up-to-date
# check of a :latest and the removal of stale hash tags. Sourced; part of every image's key.

# image_scripts_sha IMAGE: sha256 of images/IMAGE.sh and of the images/lib/*.sh it uses
# (image_uses), by name and content: editing another image's script changes nothing here.
image_scripts_sha() {
  local image=$1 lib
  [[ -n ${IMAGE_LIBS[$image]+set} ]] || die "images/$image.sh did not say what it uses (image_uses)"
  {
    printf '%s.sh %s\n' "$image" "$(sha256_of_file "$IMAGES_DIR/$image.sh")"
    for lib in ${IMAGE_LIBS[$image]}; do
      printf 'lib/%s.sh %s\n' "$lib" "$(sha256_of_file "$IMAGES_LIB_DIR/$lib.sh")"
    done
  } | sha256_of_stdin
}

# Print a canonical listing (type, mode, path, content hash / link target) of
# a directory tree, ignoring Python bytecode (also excluded by .dockerignore).
tree_listing() {
  local dir=$1 p
  (
    cd "$dir" || exit
    find . \( -name __pycache__ -o -name '*.pyc' \) -prune -o -print0 |
      LC_ALL=C sort -z |
      while IFS= read -r -d '' p; do
        if [[ -L $p ]]; then
          printf 'l %s -> %s\n' "$p" "$(readlink "$p")"
        elif [[ -d $p ]]; then
          printf 'd %s %s\n' "$(stat -c %a "$p")" "$p"
        elif [[ -f $p ]]; then
          printf 'f %s %s %s\n' "$(stat -c %a "$p")" "$p" "$(sha256_of_file "$p")"
        else
          printf 'o %s\n' "$p"
        fi
      done
  )
}

short() { printf '%s' "${1:0:16}"; }

# up_to_date REPO HASH: latest carries HASH (then make sure the hash tag exists).
up_to_date() {
  local repo=$1 hash=$2
  ((FORCE == 0)) || return 1
  [[ $(image_label "$repo:latest" "$LABEL_INPUTS") == "$hash" ]] || return 1
  if [[ $(image_id "$repo:$(short "$hash")") != "$(image_id "$repo:latest")" ]]; then
    docker tag "$repo:latest" "$repo:$(short "$hash")"
  fi
}

# Remove our images of REPO whose tag is neither a KEEP nor latest.
prune_repo() {
  local repo=$1 tag
  shift
  while IFS= read -r tag; do
    case $tag in latest | '<none>' | '') continue ;; esac
    [[ " $* " == *" $tag "* ]] && continue
    if docker image rm "$repo:$tag" >/dev/null 2>&1; then
      step "removed stale $repo:$tag"
    else
      warn "could not remove stale $repo:$tag (in use by a container?)"
    fi
  done < <(docker image ls --format '{{.Tag}}' "$repo")
}

