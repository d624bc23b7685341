#!/usr/bin/env bash
# The CPU time of a command and of every process it starts, waited for or not, reparented or in
# sandboxes of their own: the command runs in a cpuacct cgroup (v1) of its own, whose counter
# keeps what its ended members used. Root only. Measures one test module, say, even while other
# work runs on the machine (which still slows it, but is not counted):
#
#   sudo bench/cgroup_cpu.sh .venv/bin/python -m pytest -n 0 -q tests/functional/test_layers.py
set -uo pipefail
root=/sys/fs/cgroup/cpuacct
[ -w "$root" ] || { echo "cgroup_cpu: $root is not writable (root and cgroup v1 cpuacct needed)" >&2; exit 3; }
group="$root/fe-ci-cpu-$$"
mkdir "$group" || exit 3
start=$(date +%s.%N)
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$group" "$@"
rc=$?
end=$(date +%s.%N)
# members that outlived the command (a daemon it left) go back to the root group, uncounted
while read -r pid; do echo "$pid" > "$root/cgroup.procs" 2>/dev/null; done < "$group/cgroup.procs"
read -r user sys < <(awk '{print $2}' "$group/cpuacct.stat" | xargs)
hz=$(getconf CLK_TCK)
printf 'cgroup_cpu: wall %.1f s, cpu %.1f s (user %.1f, sys %.1f), exit %d\n' \
  "$(echo "$end - $start" | bc)" "$(echo "$(cat "$group/cpuacct.usage") / 1000000000" | bc -l)" \
  "$(echo "$user / $hz" | bc -l)" "$(echo "$sys / $hz" | bc -l)" "$rc" >&2
rmdir "$group" 2>/dev/null
exit "$rc"
