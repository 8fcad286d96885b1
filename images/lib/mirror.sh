# shellcheck shell=bash disable=SC2034 # its variables are read by the scripts that source it
# images/lib/mirror.sh - which Debian mirror the rootfs images are built from: the host's own
# apt sources (deb822 *.sources, sources.list, *.list), preferring Origin: Debian, with its
# -updates and -security suites when the host has them; SANDPOOL_APT_MIRROR and
# SANDPOOL_APT_SECURITY_MIRROR override it. Sourced; part of the rootfs images' keys.

readonly SUITE=bookworm
MIRROR=
SECURITY_MIRROR=
UPDATES_SUITE=

# Print "uri<TAB>suite<TAB>components" for every enabled deb source of the host.
list_apt_sources() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush(   i, j, nu, ns, u, s) {
        if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no") {
          nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
            if (u[i] != "" && s[j] != "") print u[i] "\t" s[j] "\t" comps
        }
        types = uris = suites = comps = enabled = ""; key = ""
      }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { val = $0; sub(/^[ \t]+/, "", val)
                 if (key == "types") types = types " " val
                 else if (key == "uris") uris = uris " " val
                 else if (key == "suites") suites = suites " " val
                 else if (key == "components") comps = comps " " val
                 next }
      { key = tolower($0); sub(/:.*/, "", key)
        val = $0; sub(/^[^:]*:[ \t]*/, "", val); sub(/[ \t]+$/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "components") comps = val
        else if (key == "enabled") enabled = val }
      END { flush() }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk '
      { sub(/#.*/, "") }
      $1 != "deb" { next }
      { i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if (i + 1 > NF) next
        comps = ""; for (j = i + 2; j <= NF; j++) comps = comps " " $j
        print $i "\t" $(i + 1) "\t" comps }
    ' "$f"
  done
}

# Origin of a host apt source, from the Release file apt already downloaded.
source_origin() {
  local uri=${1%/} suite=$2 name f
  name=${uri#*://}
  name=${name#*@}
  name=${name//\//_}
  for f in "/var/lib/apt/lists/${name}_dists_${suite}_InRelease" \
    "/var/lib/apt/lists/${name}_dists_${suite}_Release"; do
    if [[ -f $f ]]; then
      sed -n 's/^Origin: *//p' "$f" | head -n 1
      return 0
    fi
  done
}

# pick_source SUITE: the host source for SUITE with component main, preferring
# one whose Release file says Origin: Debian (not a third-party repo that
# happens to use the same suite name).
pick_source() {
  local want=$1 uri suite comps best='' best_rank=0 rank
  while IFS=$'\t' read -r uri suite comps; do
    [[ $suite == "$want" && " $comps " == *" main "* ]] || continue
    case $uri in http://* | https://* | file:/*) ;; *) continue ;; esac
    case $(source_origin "$uri" "$suite") in
      Debian) rank=3 ;;
      '') rank=2 ;;
      *) rank=1 ;;
    esac
    if ((rank > best_rank)); then
      best=${uri%/}
      best_rank=$rank
    fi
  done < <(list_apt_sources)
  printf '%s' "$best"
}

resolve_mirror() {
  local sec
  MIRROR=${SANDPOOL_APT_MIRROR:-$(pick_source "$SUITE")}
  [[ -n $MIRROR ]] || die "no Debian '$SUITE' main source found in /etc/apt/sources.list{,.d/*.sources,.d/*.list}; set SANDPOOL_APT_MIRROR"
  sec=${SANDPOOL_APT_SECURITY_MIRROR:-$(pick_source "$SUITE-security")}
  [[ $sec == none ]] && sec=
  SECURITY_MIRROR=$sec
  UPDATES_SUITE=
  if [[ -z ${SANDPOOL_APT_MIRROR:-} ]] &&
    list_apt_sources | awk -F'\t' -v u="$MIRROR" -v s="$SUITE-updates" \
      '{ sub(/\/$/, "", $1) } $1 == u && $2 == s { f = 1 } END { exit !f }'; then
    UPDATES_SUITE="$SUITE-updates"
  fi
}
