#!/bin/bash
# CPU (user and system, in clock ticks) and write syscalls of each of a running daemon's threads
# over a window, by thread name: where a load's CPU goes, kernel time included (callgrind counts
# user-space instructions only). BENCHMARKS.md round 27 reads it during a switchyard-bench run.
# Usage: thread_cpu.sh PID [SECONDS=4]
set -eu
pid=$1
seconds=${2:-4}
snap() {
    for task in /proc/"$pid"/task/*; do
        name=$(tr ' ' '_' < "$task/comm")
        # After the ") " closing the command name: field 3 (state) on; utime and stime are
        # fields 14 and 15.
        read -r utime stime < <(sed 's/.*) //' "$task/stat" | awk '{print $12, $13}')
        syscw=$(awk '/^syscw/ {print $2}' "$task/io" 2>/dev/null || echo 0)
        wchar=$(awk '/^wchar/ {print $2}' "$task/io" 2>/dev/null || echo 0)
        echo "$name $utime $stime $syscw $wchar"
    done | awk '{u[$1]+=$2; s[$1]+=$3; w[$1]+=$4; b[$1]+=$5} END {for (k in u) print k, u[k], s[k], w[k], b[k]}' | sort
}
before=$(snap)
sleep "$seconds"
after=$(snap)
echo "thread user_ticks system_ticks write_syscalls bytes_written (over ${seconds}s; $(getconf CLK_TCK) ticks/s)"
join <(echo "$before") <(echo "$after") |
    awk '{printf "%s %d %d %d %d\n", $1, $6-$2, $7-$3, $8-$4, $9-$5}'
