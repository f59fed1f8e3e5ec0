#!/bin/bash
# 03-grant: the device-cgroup grant is what makes the RDMA device usable.
# (a) a runc container with device rules for exactly the granted nodes opens
#     uverbs and `fi_info -p verbs` lists rxe0;
# (b) a container that sees uverbs through a bind mount but has no cgroup rule
#     gets EPERM, and `fabricctl check` there says not-granted, exit != 0.
# The grant comes from 02-register-allocate's Allocate answer when that ran;
# otherwise from sysfs (the answer the agent should give), noted in the result.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
command -v runc >/dev/null || skip "runc not installed"
read -r uverbs _ < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"
GRANT=$E2E_OUTDIR/cases/02-register-allocate/grant.txt
notes=()
if [[ -s $GRANT ]]; then
  mapfile -t nodes < "$GRANT"
  log "grant from the Allocate answer: ${nodes[*]}"
else
  nodes=("/dev/infiniband/$uverbs" /dev/infiniband/rdma_cm)
  notes+=("grant from sysfs, no Allocate answer yet")
  log "grant from sysfs: ${nodes[*]}"
fi
devs='[]' rules='[{"allow":false,"access":"rwm"}]'
for n in "${nodes[@]}"; do
  [[ -c $n ]] || fail "granted node $n is not a char device in the VM"
  IFS=: read -r maj min < <(devnode_numbers "$n")
  devs=$(jq -c --arg p "$n" --argjson M "$maj" --argjson m "$min" \
    '. + [{path:$p,type:"c",major:$M,minor:$m,fileMode:438,uid:0,gid:0}]' <<<"$devs")
  rules=$(jq -c --argjson M "$maj" --argjson m "$min" \
    '. + [{allow:true,type:"c",major:$M,minor:$m,access:"rw"}]' <<<"$rules")
done
B=$TMP/bundle
make_bundle "$B" || fail "runc spec failed"

CHECK="echo FABRICCTL_SKIPPED"
[[ -x $FABRICCTL ]] && CHECK="$FABRICCTL check -o json > /tmp/check.json; echo FABRICCTL_EXIT=\$?; cat /tmp/check.json"
# verdict_of OUTPUT : the verdict of the JSON report after FABRICCTL_EXIT=.
verdict_of() { sed -n '/^FABRICCTL_EXIT=/,$p' <<<"$1" | sed 1d | jq -r '.verdict // empty' 2>/dev/null; }
exit_of() { grep -oE '^FABRICCTL_EXIT=[0-9]+' <<<"$1" | cut -d= -f2; }

# (a) granted. RLIMIT_MEMLOCK 1 GiB so that `fabricctl check` can say ok.
script="exec 3<>/dev/infiniband/$uverbs && echo UVERBS_OPEN_OK; exec 3>&-; fi_info -p verbs; $CHECK"
out=$(runc_run "$B" e2e-granted '.process.args=["/bin/sh","-c",$s] | .linux.devices=$d | .linux.resources.devices=$r
    | .process.rlimits += [{type:"RLIMIT_MEMLOCK",soft:1073741824,hard:1073741824}]' \
  --arg s "$script" --argjson d "$devs" --argjson r "$rules" 2>&1)
rc=$?
echo "== granted container (exit $rc)"; echo "$out"
grep -q UVERBS_OPEN_OK <<<"$out" || fail "granted container cannot open /dev/infiniband/$uverbs: $(head -n 2 <<<"$out" | tr '\n' ' ')"
grep -qE "domain: +$IBDEV\b" <<<"$out" || fail "fi_info -p verbs in the granted container does not list $IBDEV (exit $rc)"
if [[ -x $FABRICCTL ]]; then
  v=$(verdict_of "$out")
  [[ $v == ok && $(exit_of "$out") == 0 ]] ||
    fail "fabricctl check in the granted container: verdict '$v' exit '$(exit_of "$out")', want ok/0"
fi

# (b) bind mount, no cgroup rule
out=$(runc_run "$B" e2e-bind '.process.args=["/bin/sh","-c",$s] | .linux.devices=[]
    | .linux.resources.devices=[{"allow":false,"access":"rwm"}]
    | .mounts += [{destination:$n, type:"bind", source:$n, options:["bind"]}]' \
  --arg n "/dev/infiniband/$uverbs" \
  --arg s "test -c /dev/infiniband/$uverbs && echo NODE_VISIBLE; (exec 3<>/dev/infiniband/$uverbs) && echo UVERBS_OPEN_OK; $CHECK" 2>&1)
echo "== bind-mounted, not granted"; echo "$out"
grep -q NODE_VISIBLE <<<"$out" || fail "bind-mounted node not visible in the container: $out"
! grep -q UVERBS_OPEN_OK <<<"$out" || fail "uverbs opened WITHOUT a cgroup grant"
grep -q 'Operation not permitted' <<<"$out" || fail "open without grant: want EPERM, got: $(tr '\n' ' ' <<<"$out")"
if [[ -x $FABRICCTL ]]; then
  v=$(verdict_of "$out") ex=$(exit_of "$out")
  [[ $v == not-granted ]] || fail "fabricctl check without grant: verdict '$v', want not-granted"
  [[ -n $ex && $ex != 0 ]] || fail "fabricctl check without grant: exit '$ex', want non-zero"
  notes+=("fabricctl check: ok with grant, not-granted (exit $ex) without")
else
  notes+=("fabricctl not built yet, check verdicts untested")
fi
joined=$(printf '%s; ' "${notes[@]}")
pass "${joined%; }"
