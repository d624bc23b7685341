#!/usr/bin/env bash
# The whole machine's busy and idle CPU seconds while a command runs, from /proc/stat: what a
# suite costs on a quiet machine, every process counted (sandboxed, reparented or daemonised),
# and how much of the cores it left unused. Run nothing else meanwhile:
#
#   bench/machine_cpu.sh bash -c "time ./scripts/test -q"
#
# busy = user + nice + system + irq + softirq + steal; idle = idle + iowait (guest time is
# already inside user). Prints one line on stderr after the command ends and exits with its code.
set -uo pipefail
read_cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat; }
hz=$(getconf CLK_TCK)
read -r busy0 idle0 < <(read_cpu)
start=$(date +%s.%N)
"$@"
rc=$?
end=$(date +%s.%N)
read -r busy1 idle1 < <(read_cpu)
printf 'machine_cpu: wall %.1f s, busy %.1f s, idle %.1f s on %d cores, exit %d\n' \
  "$(echo "$end - $start" | bc)" "$(echo "($busy1 - $busy0) / $hz" | bc -l)" \
  "$(echo "($idle1 - $idle0) / $hz" | bc -l)" "$(nproc)" "$rc" >&2
exit "$rc"
