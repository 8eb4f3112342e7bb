"""K and the CPU engines' threads follow the CPUs the server may really use: the affinity mask and
a cgroup CPU quota (a pod's CPU limit), read from fake cgroup files (engine/contract/cpu_quota.py, server/processes/topology.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rose_embed.engine.contract import cpu_quota
from rose_embed.engine.contract.cpu_quota import available_cores, cgroup_cpu_limit
from rose_embed.server.processes.topology import default_front_ends


def fake_root(tmp_path: Path, proc_cgroup: str | None, files: dict[str, str]) -> Path:
    """A filesystem root holding /proc/self/cgroup (None: absent) and the given files under
    /sys/fs/cgroup."""
    if proc_cgroup is not None:
        (tmp_path / "proc/self").mkdir(parents=True)
        (tmp_path / "proc/self/cgroup").write_text(proc_cgroup)
    for name, text in files.items():
        path = tmp_path / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_v2_without_a_limit_is_no_quota(tmp_path):
    assert cgroup_cpu_limit(fake_root(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})) is None


def test_v2_limit_in_whole_cores(tmp_path):
    assert cgroup_cpu_limit(fake_root(tmp_path, "0::/\n", {"cpu.max": "400000 100000\n"})) == 4


@pytest.mark.parametrize("quota, cores", [("150000 100000", 2), ("50000 100000", 1), ("250000 100000", 3),
                                          ("300000 100000", 3)])
def test_a_fractional_quota_rounds_up(tmp_path, quota, cores):
    assert cgroup_cpu_limit(fake_root(tmp_path, "0::/\n", {"cpu.max": quota})) == cores


def test_v2_reads_the_process_own_nested_cgroup_and_the_least_limit_above_it(tmp_path):
    proc = "0::/kubepods.slice/pod1/ctr\n"
    root = fake_root(tmp_path, proc, {
        "kubepods.slice/cpu.max": "max 100000",
        "kubepods.slice/pod1/cpu.max": "300000 100000",  # the pod's limit binds its container too
        "kubepods.slice/pod1/ctr/cpu.max": "max 100000",
        "other/cpu.max": "100000 100000",  # another cgroup's limit is not this process's
    })
    assert cgroup_cpu_limit(root) == 3
    (root / "sys/fs/cgroup/kubepods.slice/pod1/ctr/cpu.max").write_text("200000 100000")
    assert cgroup_cpu_limit(root) == 2


def test_a_host_side_path_the_mount_does_not_show_falls_back_to_the_mount_root(tmp_path):
    """A container without a cgroup namespace reads its host-side path; its mount's root is its own cgroup."""
    root = fake_root(tmp_path, "0::/system.slice/docker-abc.scope\n", {"cpu.max": "600000 100000"})
    assert cgroup_cpu_limit(root) == 6


def test_v1_with_and_without_a_quota(tmp_path):
    proc = "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n2:cpuset:/\n"
    root = fake_root(tmp_path, proc, {"cpu/docker/abc/cpu.cfs_quota_us": "-1\n",
                                      "cpu/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpu_limit(root) is None
    (root / "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us").write_text("250000\n")
    assert cgroup_cpu_limit(root) == 3


def test_v1_mounted_as_cpu_cpuacct_only(tmp_path):
    root = fake_root(tmp_path, "2:cpuacct,cpu:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "100000",
                                                      "cpu,cpuacct/cpu.cfs_period_us": "100000"})
    assert cgroup_cpu_limit(root) == 1


@pytest.mark.parametrize("files", [
    {},  # no cgroup files at all (not Linux, or not mounted)
    {"cpu.max": ""},  # unreadable as a quota
    {"cpu.max": "garbage"},
    {"cpu.max": "100000 0"},
    {"cpu/cpu.cfs_quota_us": "100000"},  # a quota without its period
])
def test_missing_or_unreadable_files_mean_no_quota(tmp_path, files):
    assert cgroup_cpu_limit(fake_root(tmp_path, None, files)) is None


def test_without_proc_self_cgroup_the_mount_root_still_counts(tmp_path):
    assert cgroup_cpu_limit(fake_root(tmp_path, None, {"cpu.max": "200000 100000"})) == 2


def test_unreadable_file_is_no_quota(tmp_path):
    root = fake_root(tmp_path, "0::/\n", {})
    (root / "sys/fs/cgroup/cpu.max").mkdir(parents=True)  # reading a folder raises OSError
    assert cgroup_cpu_limit(root) is None


@pytest.mark.parametrize("affinity, quota, cores", [(16, None, 16), (16, 4, 4), (2, 8, 2), (1, None, 1)])
def test_available_cores_is_the_least_of_affinity_and_quota(monkeypatch, affinity, quota, cores):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)), raising=False)
    monkeypatch.setattr(cpu_quota, "cgroup_cpu_limit", lambda: quota)
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    assert available_cores() == cores


def test_process_cpu_count_counts_where_python_has_it(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(cpu_quota, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(os, "process_cpu_count", lambda: 6, raising=False)  # 3.13+, PYTHON_CPU_COUNT=6
    assert available_cores() == 6
    monkeypatch.setattr(os, "process_cpu_count", lambda: None, raising=False)  # "undetermined"
    assert available_cores() == 16


def test_a_pod_limited_to_4_cpus_on_a_large_node_runs_2_front_ends(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    monkeypatch.setattr(cpu_quota, "cgroup_cpu_limit", lambda: 4)
    assert default_front_ends(("cuda:0",)) == 2


def test_this_machine_counts_at_least_one_core_and_no_more_than_its_affinity():
    assert 1 <= available_cores() <= len(os.sched_getaffinity(0))


@pytest.mark.slow  # loads the default model
def test_an_engine_on_a_quota_runs_no_more_threads_than_it_may_use(monkeypatch):
    """Engine (the library, the corpus CLI) with no thread count: torch's default, cut to the quota."""
    import torch

    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    before = torch.get_num_threads()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    monkeypatch.setattr(cpu_quota, "cgroup_cpu_limit", lambda: 1)
    try:
        Engine(EngineConfig(device="cpu", max_batch_tokens=512))
        assert torch.get_num_threads() == 1
        Engine(EngineConfig(device="cpu", max_batch_tokens=512, num_threads=2))  # a count given is obeyed
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
