from __future__ import annotations

import mmap
import sys

import pytest

from edgekit.probes.memory import RssTracker, file_sizes, memory_snapshot, parse_proc_status

# An excerpt of a real /proc/self/status (Linux 6.x).
PROC_STATUS = """\
Name:\tpython3
Umask:\t0022
State:\tR (running)
Pid:\t4242
VmPeak:\t  312456 kB
VmSize:\t  301220 kB
VmLck:\t       0 kB
VmHWM:\t  104880 kB
VmRSS:\t   98304 kB
RssAnon:\t   61440 kB
Threads:\t3
"""


def test_parse_proc_status_reads_rss_and_peak_in_bytes():
    assert parse_proc_status(PROC_STATUS) == (98304 * 1024, 104880 * 1024)
    assert parse_proc_status("Name:\tkthreadd\n") == (None, None)  # kernel threads have no Vm lines


def test_memory_snapshot_from_a_file(tmp_path):
    status = tmp_path / "status"
    status.write_text(PROC_STATUS)
    snap = memory_snapshot(status)
    assert (snap.rss_bytes, snap.peak_rss_bytes, snap.source) == (98304 * 1024, 104880 * 1024, str(status))


def test_memory_snapshot_falls_back_to_getrusage_peak(tmp_path):
    snap = memory_snapshot(tmp_path / "missing")
    assert snap.source == "getrusage" and snap.rss_bytes is None
    if sys.platform != "win32":
        assert snap.peak_rss_bytes and snap.peak_rss_bytes > 1_000_000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux only")
def test_rss_tracker_sees_an_allocation_grow_rss():
    tracker = RssTracker()
    tracker.start()
    tracker.after_warmup()
    # Fresh anonymous pages, each one written: a malloc'd buffer may reuse memory the process
    # freed but still holds (no RSS change), and untouched pages are not resident at all.
    size = 64 * 1024 * 1024
    block = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1
    report = tracker.stop()
    assert report.growth_bytes() >= 48 * 1024 * 1024
    assert report.growth_bytes("after_warmup", "end") >= 48 * 1024 * 1024
    doc = report.to_json()
    assert set(doc["points"]) == {"start", "after_warmup", "end"}
    assert doc["growth_after_warmup_bytes"] == report.growth_bytes("after_warmup", "end")
    assert report.peak_rss_bytes >= report.rss("end")
    block.close()


def test_rss_tracker_reports_when_the_peak_could_not_be_reset(tmp_path):
    status = tmp_path / "status"
    status.write_text(PROC_STATUS)
    tracker = RssTracker(proc_status=status, clear_refs=tmp_path / "no" / "clear_refs")
    tracker.start()
    report = tracker.stop()
    assert report.growth_bytes() == 0
    assert report.to_json()["peak_is_since_process_start"] is True
    with pytest.raises(KeyError):
        report.rss("after_warmup")


def test_the_session_peak_leaves_out_what_the_process_held_before_it(tmp_path):
    """A variant profiled after another starts on the other's leftovers: its own peak is the one
    over its start (Sana-600M: INT8's process peak read 0.95x FP32's, FP32's weights under it)."""
    status, clear = tmp_path / "status", tmp_path / "clear_refs"
    status.write_text(PROC_STATUS.replace("104880", "98304"))  # reset: the peak is the RSS at start
    tracker = RssTracker(proc_status=status, clear_refs=clear)
    tracker.start()
    status.write_text(PROC_STATUS.replace("98304", "131072").replace("104880", "163840"))
    report = tracker.stop()
    assert clear.read_text() == "5"
    assert report.session_peak_bytes == (163840 - 98304) * 1024
    assert report.to_json()["session_peak_bytes"] == report.session_peak_bytes
    # Where the peak could not be reset it holds the process's whole life: no session figure.
    unreset = RssTracker(proc_status=status, clear_refs=tmp_path / "no" / "clear_refs")
    unreset.start()
    assert unreset.stop().session_peak_bytes is None


def test_file_sizes_of_files_and_directories(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"x" * 1000)
    engines = tmp_path / "engines"
    (engines / "cpu").mkdir(parents=True)
    (engines / "cpu" / "a.ort").write_bytes(b"y" * 300)
    (engines / "b.plan").write_bytes(b"z" * 200)
    sizes = file_sizes([tmp_path / "model.onnx", engines])
    assert sizes == {str(tmp_path / "model.onnx"): 1000, str(engines): 500}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_is_handed_back_where_glibc_can():
    from edgekit.probes import memory as probe_memory

    assert probe_memory.give_back_freed() in (True, False)  # musl has no malloc_trim: False, and no error
    if probe_memory._TRIM is not None:
        assert probe_memory.give_back_freed() is True
