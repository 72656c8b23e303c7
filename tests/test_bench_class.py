"""checks/bench_class.py's CPU column: the meter counts a child's CPU by each method, and the table's figures
(the CPU bound and wall ÷ bound) come out of the numbers given.  No grading runs here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checks import bench_class
from checks.bench_class import bound_figures, cpu_meter, row

BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"


def _burn(meter) -> float:
    """CPU seconds the meter saw a spawned Python use while it burned ~0.3 s."""
    before = meter.read()
    subprocess.run([*meter.prefix, sys.executable, "-c", BURN], check=True, timeout=30)
    return meter.read() - before


def test_the_cgroup_v1_meter_counts_a_childs_cpu_and_removes_its_group():
    if os.geteuid() != 0 or not (bench_class.CPUACCT / "cpuacct.usage").exists():
        pytest.skip("cgroup v1 cpuacct is used only as root with it mounted at /sys/fs/cgroup/cpuacct")
    if (bench_class.CPUACCT / "cpu.shares").exists():
        pytest.skip("cpuacct is mounted with cpu here: the boxes' groups would take processes out of the meter's")
    with cpu_meter("cgroup") as meter:
        assert meter.method == "cgroup" and meter.group.parent == bench_class.CPUACCT
        assert 0.25 <= _burn(meter) <= 2
    assert not meter.group.exists()


def test_the_cgroup_v2_meter_counts_a_childs_cpu(monkeypatch):
    monkeypatch.setattr(bench_class, "CPUACCT", Path("/nonexistent"))  # v1 out of the way
    try:
        with cpu_meter("cgroup") as meter:
            assert (meter.group / "cpu.stat").exists()
            assert 0.25 <= _burn(meter) <= 2
    except OSError:
        pytest.skip("no cgroup v2 group can be made here")
    assert not meter.group.exists()


def test_the_machine_meter_counts_a_childs_cpu_from_proc_stat():
    with cpu_meter("machine") as meter:
        assert meter.method == "machine" and meter.prefix == []
        # Machine-wide: whatever else runs meanwhile (other test workers, CPU burners) is counted too, so only
        # the child's own share is certain -- an upper bound failed once beside two burners in a fresh clone.
        assert _burn(meter) >= 0.25


def test_the_prefix_hands_the_command_its_arguments_untouched():
    with cpu_meter() as meter:
        run = subprocess.run([*meter.prefix, sys.executable, "-c", "import sys; print(sys.argv[1:])", "a b", "$x"],
                             capture_output=True, text=True, check=True, timeout=30)
    assert run.stdout.strip() == "['a b', '$x']"


def test_the_row_gives_the_cpu_bound_and_how_far_the_wall_time_is_above_it():
    line = row("-j 4", 123.4, 214.6, 30, 2)
    assert line.split()[:7] == ["-j", "4", "123.4", "214.6", "7.15", "107.3", "1.15x"]
    assert line.endswith("1.15x the CPU bound")
    assert bound_figures(123.4, 214.6, 30, 2) == {"cpu_seconds": 214.6, "cpu_seconds_per_folder": 7.15,
                                                  "cpu_bound_seconds": 107.3, "wall_over_bound": 1.15}


def test_no_cpu_counted_gives_no_ratio_rather_than_a_division_by_zero():
    assert row("-j 1", 10.0, 0.0, 0, 4).split()[-2:] == ["0.0", "-"]
    assert bound_figures(10.0, 0.0, 0, 4)["wall_over_bound"] is None
    assert bound_figures(10.0, 0.0, 0, 4)["cpu_seconds_per_folder"] is None
