#!/usr/bin/env bash
# tests/layers.sh -- rtlib is a stack of layers, each a folder with its own
# header, none calling a layer above it (docs/runtime.md, "rtlib's layers"):
#
#   base < cpu < comm < io < cuda < train
#
# Checked from the sources and from the built library:
#   - every .c of rtlib is in a layer folder, every folder is a layer, and
#     each has its header rt_<layer>.h, which every .c of the folder includes;
#   - a file includes only its own layer's headers, those of layers below,
#     and the contract headers at rtlib/'s top (rt.h, rt_kernels.h, ...);
#     never rt_internal.h (the tests' header);
#   - in libnnsc_rt.a, no object of a layer uses a symbol that an object of a
#     higher layer defines (nm).
# The symbol check is also run on the real listing with one made-up upward
# call added (kernels.c.o using rt_comm_allreduce), which it must refuse.
. "$(dirname "$0")/lib.sh" layers
layers="base cpu comm io cuda train"
rank_of() { local k=0 l; for l in $layers; do [[ $l == "$1" ]] && { echo $k; return; }; k=$((k + 1)); done; echo -1; }

rt=$top/rtlib
# ---- the folders and their headers
stray=$(cd "$rt" && ls -- *.c 2>/dev/null)
[[ -z $stray ]] && ok "no .c file at rtlib's top" || no "rtlib/ has .c files outside the layers: $stray"
for d in "$rt"/*/; do
  l=$(basename "$d")
  [[ $(rank_of "$l") -ge 0 ]] && ok "rtlib/$l is a layer" || no "rtlib/$l/ is not in the layer list ($layers)"
done
for l in $layers; do
  [[ -f $rt/$l/rt_$l.h ]] || { no "rtlib/$l has no header rt_$l.h"; continue; }
  miss=""
  for f in "$rt/$l"/*.c; do grep -q "^#include \"$l/rt_$l.h\"" "$f" || miss="$miss $(basename "$f")"; done
  [[ -z $miss ]] && ok "every .c of rtlib/$l includes $l/rt_$l.h" || no "rtlib/$l: not including $l/rt_$l.h:$miss"
done

# ---- includes: own layer, lower layers, contract headers
bad=""
for l in $layers; do
  me=$(rank_of "$l")
  for f in "$rt/$l"/*.[ch]; do
    while read -r inc; do
      case $inc in
        */*) il=${inc%%/*}; r=$(rank_of "$il")
             if [[ $r -lt 0 || $r -gt $me || ! -f $rt/$inc ]]; then bad="$bad $l/$(basename "$f"):$inc"; fi ;;
        rt_internal.h) bad="$bad $l/$(basename "$f"):$inc" ;;
        *) [[ -f $rt/$inc ]] || bad="$bad $l/$(basename "$f"):$inc" ;;
      esac
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
  done
done
[[ -z $bad ]] && ok "rtlib's files include only their own layer, the layers below and the contract headers" \
  || no "includes across the layers:$bad"

# ---- symbols: nobody calls up
lib=$build/libnnsc_rt.a
# "member layer-rank type symbol" for every symbol of every member object
listing() {
  local l f
  for l in $layers; do for f in "$rt/$l"/*.c; do echo "$(basename "$f").o $(rank_of "$l")"; done; done >"$tmp/members"
  nm -A -P "$lib" | sed -n 's/^[^[]*\[\([^]]*\)\]: \([^ ]*\) \([A-Za-z]\).*/\1 \3 \2/p' |
    awk 'NR == FNR { r[$1] = $2; next } { print $1, ($1 in r) ? r[$1] : -1, $2, $3 }' "$tmp/members" -
}
# Upward uses in a listing: "member (layer) uses symbol of member (layer)".
upward() {
  awk -v names="$layers" 'BEGIN { n = split(names, L, " ") }
    $3 ~ /^[TDBRCGSV]$/ { def[$4] = $1; rank[$4] = $2; next }
    $3 == "U" { use[++k] = $0 }
    END { for (j = 1; j <= k; j++) { split(use[j], u, " ");
            if ((u[4] in def) && rank[u[4]] > u[2])
              printf "%s (%s) uses %s of %s (%s)\n", u[1], L[u[2] + 1], u[4], def[u[4]], L[rank[u[4]] + 1] } }' "$1"
}
if [[ ! -f $lib ]]; then
  no "no $lib"
else
  listing >"$tmp/syms"
  unplaced=$(awk '$2 < 0 { print $1 }' "$tmp/syms" | sort -u)
  [[ -z $unplaced ]] && ok "every object of libnnsc_rt.a comes from a layer's .c" || no "objects of no layer: $unplaced"
  n=$(awk '$3 == "U"' "$tmp/syms" | wc -l)
  up=$(upward "$tmp/syms")
  [[ $n -gt 100 && -z $up ]] && ok "no object of libnnsc_rt.a uses a symbol of a higher layer ($n undefined references looked at)" \
    || no "upward calls in libnnsc_rt.a ($n references): $up"
  { cat "$tmp/syms"; echo "kernels.c.o $(rank_of cpu) U rt_comm_allreduce"; } >"$tmp/doctored"
  up=$(upward "$tmp/doctored")
  [[ $up == *"kernels.c.o (cpu) uses rt_comm_allreduce of comm_shm.c.o (comm)"* ]] \
    && ok "the check refuses a made-up call from cpu/kernels.c up to comm: $up" \
    || no "the symbol check missed a made-up upward call: '$up'"
fi
echo "$pass passed, $fail failed"
