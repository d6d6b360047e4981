"""`hack.proxy_process.set_group_nice`: the CPU weight a soak can give a replica's scheduling
group (`bench.soak --proxy-nice`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hack.procs import spawn, stop_process
from hack.proxy_process import AUTOGROUP_SWITCH, set_group_nice


def _autogroup(pid: int) -> str:
    """`/autogroup-N nice K`, or "" for a process in the kernel's default group (init's session
    and every session never moved off it print nothing: kernel/sched/autogroup.c,
    proc_sched_autogroup_show_task), as a CI runner's test process may be."""
    return Path(f"/proc/{pid}/autogroup").read_text().strip()


def _group(line: str) -> str:
    return line.split()[0] if line else "default"


def test_a_spawned_process_group_takes_the_nice_value_and_this_process_keeps_its_own(tmp_path: Path) -> None:
    my_nice = os.getpriority(os.PRIO_PROCESS, os.getpid())
    proc = spawn([sys.executable, "-c", "import time; time.sleep(60)"], log=tmp_path / "sleeper.log")
    try:
        if not Path("/proc/self/autogroup").exists() or AUTOGROUP_SWITCH.read_text().strip() != "1":
            # no autogroups: CFS weighs each process, so the process takes the value
            want = min(my_nice + 1, 19)  # the child starts at this process's value
            assert set_group_nice(proc.pid, want) == "process"
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == want
            assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == my_nice
            return
        mine = _autogroup(os.getpid())
        assert _autogroup(proc.pid).endswith("nice 0")
        assert set_group_nice(proc.pid, 7) == "autogroup"
        assert _autogroup(proc.pid).endswith("nice 7")
        assert set_group_nice(proc.pid, 0) == ""  # 0 leaves the group as it is
        assert _autogroup(proc.pid).endswith("nice 7")
        # spawn starts a session of its own: a group of its own, so this process's is untouched
        assert _group(_autogroup(proc.pid)) != _group(mine)
        assert _autogroup(os.getpid()) == mine
        assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == my_nice
    finally:
        stop_process(proc, grace=2.0)
