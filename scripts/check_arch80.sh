#!/usr/bin/env bash
# check_arch80.sh BUILD_DIR BASE_REV — compiles every CUDA source changed since BASE_REV (and every .cu
# that includes a changed .cuh) for the compute_80 PTX target, the second half of CI's default
# DS4_CUDA_ARCHS "90;80-virtual". Engineers build sm_90 only, so code that exists only on sm_90
# (clusters, TMA, griddepcontrol) and is not behind the __CUDA_ARCH__ guard passes their build and
# breaks CI's. Flags come from BUILD_DIR/compile_commands.json (CMake writes it); the arch flag is
# swapped and the object goes to a temporary file. Exit status: non-zero when any file fails.
set -euo pipefail
build=${1:?usage: check_arch80.sh BUILD_DIR BASE_REV}
base=${2:?usage: check_arch80.sh BUILD_DIR BASE_REV}
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "check_arch80: $db not found (configure with CMake first)" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)

mapfile -t changed < <(git diff --name-only "$base" HEAD -- '*.cu' '*.cuh')
[ ${#changed[@]} -gt 0 ] || { echo "check_arch80: no CUDA sources changed since $base"; exit 0; }

# The .cu files to compile: changed ones, plus those that include a changed header by name.
declare -A files=()
for f in "${changed[@]}"; do
  [ -e "$root/$f" ] || continue                      # deleted in this change
  case "$f" in
    *.cu) files["$root/$f"]=1 ;;
    *.cuh)
      name=$(basename "$f")
      while IFS= read -r user; do files["$user"]=1; done < <(grep -rl --include='*.cu' "\"[^\"]*$name\"" "$root/src" "$root/tests" "$root/bench" 2>/dev/null || true)
      ;;
  esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for src in "${!files[@]}"; do
  cmd=$(python3 - "$db" "$src" <<'EOF'
import json, sys, shlex
db, src = sys.argv[1], sys.argv[2]
for entry in json.load(open(db)):
    if entry["file"] == src:
        print(entry["command"])
        break
EOF
)
  if [ -z "$cmd" ]; then echo "check_arch80: $src is not in $db (not built by this folder), skipped"; continue; fi
  # Swap the arch flags for the compute_80 PTX target, drop ccache, dependency files and the object path.
  cmd=$(sed -E -e 's#--generate-code=arch=[^ ]+##g' -e 's#^ccache ##' -e 's# -MD -MT [^ ]+ -MF [^ ]+##' \
                -e 's# -o [^ ]+$##' <<<"$cmd")
  out="$tmp/$(basename "$src").o"
  if (cd "$build" && eval "$cmd --generate-code=arch=compute_80,code=[compute_80] -o $out") > "$tmp/log" 2>&1; then
    echo "check_arch80: ok   ${src#$root/}"
  else
    echo "check_arch80: FAIL ${src#$root/}"; sed -n 1,40p "$tmp/log"; fail=1
  fi
done
exit $fail
